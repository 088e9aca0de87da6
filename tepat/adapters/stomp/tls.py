"""STOMP over TLS (``stomp+ssl://``): what the client trusts, its certificate, why a connect failed.

stomp.py wraps the socket itself (``Connection.set_ssl``) in a
``PROTOCOL_TLS_CLIENT`` context: the broker's certificate must chain to a
trusted CA and name the URL's host (TLS 1.2 or later). The trusted CAs are
:attr:`TlsFiles.ca_file` if set (and then only those), else the system trust
store, or certifi's bundle where the system has none (a slim image). Managed
brokers (Amazon MQ) have publicly trusted certificates: no CA file needed.

When the handshake fails stomp.py only logs the reason and raises a bare
``ConnectFailedException``; :func:`diagnose` then repeats the connection alone
(TCP, TLS, a STOMP ``CONNECT``) to say why, and which setting to change.

Over TLS stomp.py (9.0.0) reads in non-blocking mode and takes the end of the
stream, or a read error before ``CONNECTED``, for "no data yet": on a closed
socket its loop spun at full CPU until the heartbeat timed out (20 s, measured
by stopping the broker), and a connect the broker refused after the handshake
(a missing client certificate under TLS 1.3) waited forever. :class:`TlsTransport`
ends the loop instead, so a lost TLS connection is reported at once, as on TCP.
"""

from __future__ import annotations

import functools
import os
import socket
import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import certifi
from stomp import exception as stomp_exception
from stomp.transport import Transport

from tepat.adapters.stomp.url import StompTarget, TlsFiles

# what a failure says to change: the URL (host, port, credentials), the CA file,
# or the client certificate
Culprit = Literal["url", "ca_file", "cert_file"]
# OpenSSL's X509_V_ERR_HOSTNAME_MISMATCH and X509_V_ERR_IP_ADDRESS_MISMATCH
_NAME_MISMATCH = frozenset({62, 64})
# the first byte of a TLS alert record: a TLS port's answer to plain text
_TLS_ALERT = b"\x15"
# in the TLS alerts a broker sends when it wants a (different) client certificate
# (alerts from the server about certificates are about the client's)
_CLIENT_CERT_ALERTS = ("CERTIFICATE", "UNKNOWN_CA", "HANDSHAKE_FAILURE")


@dataclass(frozen=True, slots=True)
class Diagnosis:
    reason: str
    culprit: Culprit | None  # None: nothing a setting can fix (the broker is down, a timeout)


@functools.cache
def default_ca_file() -> str | None:
    """None when the system trust store has CAs (OpenSSL loads it), else certifi's bundle."""
    paths = ssl.get_default_verify_paths()
    if paths.cafile:
        return None
    if paths.capath:
        with os.scandir(paths.capath) as entries:
            if any(entries):
                return None
    return str(certifi.where())


class TlsTransport(Transport):  # type: ignore[misc]
    """stomp.py's transport, whose read loop ends when the TLS stream does."""

    def receive(self) -> bytes:
        try:
            data: bytes = self.socket.recv(getattr(self, "_Transport__recv_bytes", 1024))
        except (ssl.SSLWantReadError, ssl.SSLWantWriteError):
            raise  # no data yet: the loop waits in select()
        except InterruptedError:
            raise stomp_exception.InterruptedException() from None
        except OSError:
            self.running = False
            raise
        if not data:  # the end of the stream
            self.running = False
        return data


def set_ssl(conn: Any, host: str, port: int, files: TlsFiles) -> None:
    """Make stomp.py's connection ``conn`` speak TLS to ``host:port`` (verified)."""
    # same state, one method more (see TlsTransport)
    conn.transport.__class__ = TlsTransport
    conn.set_ssl(
        for_hosts=[(host, port)],
        ca_certs=files.ca_file or default_ca_file(),
        cert_file=files.cert_file,
        key_file=files.key_file,
        # an encrypted key then fails to load instead of OpenSSL prompting on the terminal
        password="",
    )


def context(files: TlsFiles) -> ssl.SSLContext:
    """The context stomp.py builds from the same settings (for checks and diagnosis)."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ca = files.ca_file or default_ca_file()
    if ca:
        ctx.load_verify_locations(ca)
    else:
        ctx.load_default_certs()
    if files.cert_file:
        ctx.load_cert_chain(files.cert_file, files.key_file or None, password="")
    return ctx


# -- configuration checks (ValueError with a short message) -------------------


def check_readable(path: str) -> None:
    p = Path(path)
    if not p.is_file():
        raise ValueError(f"no such file: {path}")
    if not os.access(p, os.R_OK):
        raise ValueError(f"cannot read {path}")


def check_ca_file(path: str) -> None:
    check_readable(path)
    try:
        ssl.create_default_context(cafile=path)
    except ssl.SSLError as e:
        raise ValueError(f"{path} holds no PEM CA certificate ({e.reason or e})") from None


def check_client_files(cert_file: str, key_file: str | None) -> None:
    check_readable(cert_file)
    if key_file:
        check_readable(key_file)
    try:
        ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).load_cert_chain(cert_file, key_file, password="")
    except ssl.SSLError as e:
        if e.reason == "KEY_VALUES_MISMATCH":
            raise ValueError(f"the key does not belong to the certificate in {cert_file}") from None
        what = f"{cert_file} and {key_file}" if key_file else f"{cert_file} (certificate and key)"
        raise ValueError(
            f"cannot load {what} as PEM ({e.reason or 'PEM lib'}); the key must be unencrypted"
        ) from None


# -- why a connect failed ------------------------------------------------------


def diagnose(target: StompTarget, timeout: float, *, timed_out: bool = False) -> Diagnosis | None:
    """Connect alone (TCP, TLS, STOMP CONNECT) and say what fails; None if it all works.

    ``timed_out``: the connect got no answer. Over TLS that is what a plain STOMP
    port does with a TLS greeting (ActiveMQ waits for a frame): ask it plain
    STOMP first, since a TLS handshake would only time out again.
    Blocking: run it on a thread.
    """
    where = f"{target.host}:{target.port}"
    if timed_out and target.tls is not None and _speaks_plain_stomp(target, timeout):
        return Diagnosis(
            f"{where} speaks plain STOMP, not TLS: use stomp:// for it, or the broker's"
            " stomp+ssl port (61614 by default)",
            "url",
        )
    try:
        sock = socket.create_connection((target.host, target.port), timeout)
    except OSError as e:
        return Diagnosis(f"cannot open a TCP connection to {where}: {e.strerror or e}", None)
    with sock:
        stream: socket.socket = sock
        if target.tls is not None:
            try:
                stream = context(target.tls).wrap_socket(sock, server_hostname=target.host)
            except ssl.SSLCertVerificationError as e:
                culprit: Culprit = "url" if e.verify_code in _NAME_MISMATCH else "ca_file"
                hint = (
                    "; the host in the URL must be a name the certificate lists"
                    if culprit == "url"
                    else ""
                )
                return Diagnosis(
                    f"TLS to {where}: certificate verify failed: {e.verify_message.rstrip('.')}"
                    f" ({_trust(target.tls)}){hint}",
                    culprit,
                )
            except ssl.SSLError as e:
                return _tls_error(where, e)
            except OSError as e:
                return Diagnosis(f"TLS to {where}: the handshake broke off: {e}", None)
        return _stomp_connect(stream, target, where)


def _trust(files: TlsFiles) -> str:
    if files.ca_file:
        return f"trusting the CAs in {files.ca_file}"
    return "trusting the system CAs" if default_ca_file() is None else "trusting certifi's CAs"


def _speaks_plain_stomp(target: StompTarget, timeout: float) -> bool:
    try:
        with socket.create_connection((target.host, target.port), timeout) as sock:
            sock.sendall(f"CONNECT\naccept-version:1.2\nhost:{target.host}\n\n\0".encode())
            return sock.recv(16).lstrip(b"\n").startswith((b"CONNECTED", b"ERROR"))
    except OSError:
        return False


def _tls_error(where: str, e: ssl.SSLError) -> Diagnosis:
    reason = str(e.reason or e)
    if reason == "WRONG_VERSION_NUMBER":
        return Diagnosis(
            f"{where} does not speak TLS (a plain stomp:// port? stomp+ssl is 61614 by default)",
            "url",
        )
    if "ALERT" in reason.upper() and any(a in reason.upper() for a in _CLIENT_CERT_ALERTS):
        return Diagnosis(
            f"TLS to {where}: the broker refused the client certificate ({reason})", "cert_file"
        )
    return Diagnosis(f"TLS to {where}: {reason}", "url")


def _stomp_connect(stream: socket.socket, target: StompTarget, where: str) -> Diagnosis | None:
    lines = ["CONNECT", "accept-version:1.2", f"host:{target.host}"]
    if target.user is not None:  # CONNECT headers are not escaped (STOMP 1.2)
        lines += [f"login:{target.user}", f"passcode:{target.password or ''}"]
    try:
        stream.sendall(("\n".join(lines) + "\n\n\0").encode())
        raw = stream.recv(4096)
    except ssl.SSLError as e:  # TLS 1.3: a refused client certificate shows here
        return _tls_error(where, e)
    except OSError as e:
        return Diagnosis(f"{where} broke the connection after CONNECT: {e}", None)
    if target.tls is None and raw[:1] == _TLS_ALERT:
        return Diagnosis(f"{where} speaks TLS: use stomp+ssl:// for it", "url")
    command, _, rest = raw.decode("utf-8", "replace").lstrip("\n").partition("\n")
    if command == "CONNECTED":
        return None
    if command == "ERROR":
        message = rest.strip()
        for line in rest.split("\n\n")[0].split("\n"):
            name, _, value = line.partition(":")
            if name == "message":
                message = value
        return Diagnosis(f"{where} refused CONNECT: {message}", "url")
    return Diagnosis(f"{where} closed the connection without a STOMP answer", None)
