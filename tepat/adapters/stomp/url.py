"""Broker URLs, queue names and selector literals: everything checked before it goes on the wire."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import unquote, urlsplit, urlunsplit

# characters that would turn a name into a composite destination, a wildcard or
# a broken selector
_FORBIDDEN_IN_NAMES = frozenset(",/*> \t\r\n'\"")
# the scheme and default port of each transport (ActiveMQ's and Amazon MQ's)
DEFAULT_PORTS = {"stomp": 61613, "stomp+ssl": 61614}


@dataclass(frozen=True, slots=True)
class TlsFiles:
    """PEM files for ``stomp+ssl://`` (:mod:`.tls`); every one optional."""

    ca_file: str | None = None  # the CAs to trust instead of the system's
    cert_file: str | None = None  # client certificate (with its key, unless key_file)
    key_file: str | None = None  # unencrypted client key


@dataclass(frozen=True, slots=True)
class StompTarget:
    host: str
    port: int
    user: str | None = None
    password: str | None = None
    tls: TlsFiles | None = None  # None: plain TCP


def parse_stomp_url(url: str, tls: TlsFiles | None = None) -> StompTarget:
    """``stomp://[user:pass@]host[:61613]`` or ``stomp+ssl://[user:pass@]host[:61614]``
    -> :class:`StompTarget`; ``ValueError`` if bad.

    ``tls``: the files for ``stomp+ssl://`` (default: trust the system's CAs, no
    client certificate); refused with ``stomp://``, which would ignore them.
    """
    parts = urlsplit(url)
    if parts.scheme not in DEFAULT_PORTS:
        raise ValueError(f"not a stomp:// or stomp+ssl:// URL: {redact(url)!r}")
    secure = parts.scheme == "stomp+ssl"
    if tls is not None and not secure:
        raise ValueError("TLS settings given for a plain stomp:// URL: use stomp+ssl://")
    if not parts.hostname:
        raise ValueError(f"no host in broker URL {redact(url)!r}")
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        raise ValueError(f"unexpected path or query in broker URL {redact(url)!r}")
    try:
        port = parts.port or DEFAULT_PORTS[parts.scheme]
    except ValueError:
        raise ValueError(f"bad port in broker URL {redact(url)!r}") from None
    user = unquote(parts.username) if parts.username is not None else None
    password = unquote(parts.password) if parts.password is not None else None
    return StompTarget(
        parts.hostname, port, user, password, (tls or TlsFiles()) if secure else None
    )


def redact(url: str) -> str:
    """The URL without its password, for printing."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.rsplit("@", 1)[1]
    return urlunsplit(parts._replace(netloc=f"{parts.username}:***@{netloc}"))


def check_name(queue: str) -> str:
    if not queue or _FORBIDDEN_IN_NAMES.intersection(queue):
        raise ValueError(f"invalid queue name {queue!r}")
    return queue


def selector_literal(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"
