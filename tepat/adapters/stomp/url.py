"""Broker URLs, queue names and selector literals: everything checked before it goes on the wire."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

# characters that would turn a name into a composite destination, a wildcard or
# a broken selector
_FORBIDDEN_IN_NAMES = frozenset(",/*> \t\r\n'\"")


@dataclass(frozen=True, slots=True)
class StompTarget:
    host: str
    port: int
    user: str | None = None
    password: str | None = None


def parse_stomp_url(url: str) -> StompTarget:
    """``stomp://[user:pass@]host[:61613]`` -> :class:`StompTarget`; ``ValueError`` if bad."""
    parts = urlsplit(url)
    if parts.scheme != "stomp":
        raise ValueError(f"not a stomp:// URL: {url!r}")
    if not parts.hostname:
        raise ValueError(f"no host in broker URL {url!r}")
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        raise ValueError(f"unexpected path or query in broker URL {url!r}")
    try:
        port = parts.port or 61613
    except ValueError:
        raise ValueError(f"bad port in broker URL {url!r}") from None
    user = unquote(parts.username) if parts.username is not None else None
    password = unquote(parts.password) if parts.password is not None else None
    return StompTarget(parts.hostname, port, user, password)


def check_name(queue: str) -> str:
    if not queue or _FORBIDDEN_IN_NAMES.intersection(queue):
        raise ValueError(f"invalid queue name {queue!r}")
    return queue


def selector_literal(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"
