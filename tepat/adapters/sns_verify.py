"""Checking an SNS message's signature: the signing certificate fetched from SNS (and
cached), RSA PKCS#1 v1.5 over SHA-1 (``SignatureVersion`` 1) or SHA-256 (2).

The fetcher is injectable: production GETs the certificate over https with httpx (no
redirects: the URL was checked, where it leads was not); tests hand in a certificate
they made and signed with.
"""

from __future__ import annotations

import base64
import binascii
from collections import OrderedDict
from collections.abc import Awaitable, Callable

import httpx
import structlog
from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import padding, rsa

from tepat.domain.sns import SnsMessage, SnsRefused, check_cert_url, check_sns_url, string_to_sign

log = structlog.get_logger("tepat.email_events")

Fetch = Callable[[str], Awaitable[bytes]]

MAX_CERT_BYTES = 64 * 1024
# SNS signs with a handful of certificates (one per region, rotated rarely).
_CACHE_SIZE = 32


FETCH_TIMEOUT_SECONDS = 10.0


async def https_get(url: str) -> bytes:
    """GET ``url`` (already checked to be SNS's), at most :data:`MAX_CERT_BYTES`."""
    async with (
        httpx.AsyncClient(timeout=FETCH_TIMEOUT_SECONDS, follow_redirects=False) as client,
        client.stream("GET", url) as response,
    ):
        response.raise_for_status()
        body = b""
        async for chunk in response.aiter_bytes():
            body += chunk
            if len(body) > MAX_CERT_BYTES:
                raise ValueError("response too large")
        return body


class CertificateUnavailable(Exception):
    """The signing certificate could not be fetched now: a 503, so SNS tries again."""


class SnsVerifier:
    def __init__(self, fetch: Fetch = https_get) -> None:
        self._fetch = fetch
        self._keys: OrderedDict[str, rsa.RSAPublicKey] = OrderedDict()

    async def verify(self, message: SnsMessage) -> None:
        """Return if SNS signed ``message``; :class:`SnsRefused` otherwise."""
        key = await self._key(check_cert_url(message.signing_cert_url))
        try:
            signature = base64.b64decode(message.signature, validate=True)
        except (binascii.Error, ValueError):
            raise SnsRefused("Signature", "not base64") from None
        algorithm = hashes.SHA1() if message.signature_version == "1" else hashes.SHA256()
        try:
            key.verify(signature, string_to_sign(message), padding.PKCS1v15(), algorithm)
        except InvalidSignature:
            raise SnsRefused("Signature", "does not verify") from None

    async def confirm(self, message: SnsMessage) -> None:
        url = check_sns_url(message.subscribe_url or "", "SubscribeURL")
        await self._fetch(url)

    async def _key(self, url: str) -> rsa.RSAPublicKey:
        key = self._keys.get(url)
        if key is not None:
            self._keys.move_to_end(url)
            return key
        try:
            pem = await self._fetch(url)
        except (httpx.HTTPError, ValueError, OSError) as e:
            log.warning("sns_certificate_unavailable", url=url, error=str(e))
            raise CertificateUnavailable(url) from None
        try:
            public = x509.load_pem_x509_certificate(pem).public_key()
        except ValueError:
            raise SnsRefused("SigningCertURL", "not a PEM certificate") from None
        if not isinstance(public, rsa.RSAPublicKey):
            raise SnsRefused("SigningCertURL", "not an RSA certificate")
        self._keys[url] = public
        if len(self._keys) > _CACHE_SIZE:
            self._keys.popitem(last=False)
        return public
