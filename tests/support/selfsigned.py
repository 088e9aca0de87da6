"""Self-signed certificates made in the test (``cryptography``): a TLS server's, or a
signer's (an SNS message signing certificate)."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import NameOID


@dataclass(frozen=True)
class SelfSigned:
    key: rsa.RSAPrivateKey
    cert_pem: bytes
    key_pem: bytes

    def write(self, directory: Path, name: str) -> tuple[Path, Path]:
        cert, key = directory / f"{name}.pem", directory / f"{name}.key"
        cert.write_bytes(self.cert_pem)
        key.write_bytes(self.key_pem)
        return cert, key


def self_signed(common_name: str = "localhost", *, tls_server: bool = True) -> SelfSigned:
    """An RSA key and a certificate for it, signed by itself. ``tls_server``: valid for
    ``localhost`` and 127.0.0.1, and usable as its own trust anchor."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    now = datetime.now(UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(minutes=5))
        .not_valid_after(now + timedelta(days=2))
    )
    if tls_server:
        builder = builder.add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        ).add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
    cert = builder.sign(key, hashes.SHA256())
    return SelfSigned(
        key=key,
        cert_pem=cert.public_bytes(serialization.Encoding.PEM),
        key_pem=key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.TraditionalOpenSSL,
            serialization.NoEncryption(),
        ),
    )
