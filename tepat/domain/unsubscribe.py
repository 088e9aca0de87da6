"""One-click unsubscribe tokens (RFC 8058): who may be opted out of what, signed.

The link in a bulk e-mail's ``List-Unsubscribe`` header is ``{public_url}/u/{token}``.
A mail provider POSTs to it with no cookie and no login, so the token itself is the
authority: it names the user, the category and the channel, carries an expiry, and is
signed with HMAC-SHA256 under ``TEPAT_UNSUBSCRIBE_SECRET``.

The format is compact and URL-safe (base64url, no padding)::

    base64url("1\\n" expiry "\\n" channel "\\n" category "\\n" user_id) "." base64url(mac[:16])

``1`` is the format version; ``expiry`` is Unix seconds. The MAC is over a fixed prefix
and the payload bytes, truncated to 128 bits (ample: an attacker gets one guess per
request). Reading checks the shape, the signature, then the expiry: an expiry is only
believed once the signature holds. Pure.
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass
from datetime import UTC, datetime

from tepat.domain.b64url import b64url, unb64url
from tepat.domain.errors import DomainError

VERSION = "1"
_DOMAIN_SEPARATOR = b"tepat-unsubscribe\x00"
_MAC_BYTES = 16
# A user id is at most 128 characters; a category and a channel are short names. Anything
# longer than this is not a token we made, and is refused before any work is done on it.
MAX_TOKEN_CHARS = 512


@dataclass(frozen=True, slots=True)
class UnsubscribeClaim:
    """What a valid token says: opt ``user_id`` out of ``category`` on ``channel``."""

    user_id: str
    category: str
    channel: str
    expires_at: datetime


class TokenMalformed(DomainError):
    def __init__(self) -> None:
        super().__init__("token", "not an unsubscribe token")


class TokenForged(DomainError):
    def __init__(self) -> None:
        super().__init__("token", "the signature does not match")


class TokenExpired(DomainError):
    def __init__(self, expired_at: datetime) -> None:
        super().__init__("token", f"expired at {expired_at.isoformat()}")
        self.expired_at = expired_at


def make_token(secret: bytes, claim: UnsubscribeClaim) -> str:
    names = {"channel": claim.channel, "category": claim.category, "user_id": claim.user_id}
    for name, value in names.items():
        if not value or "\n" in value:
            raise DomainError(name, "must be non-empty and on one line")
    expiry = str(int(claim.expires_at.timestamp()))
    payload = "\n".join((VERSION, expiry, *names.values())).encode()
    return f"{b64url(payload)}.{b64url(_mac(secret, payload))}"


def read_token(secret: bytes, token: str, now: datetime) -> UnsubscribeClaim:
    """The claim of a token made with ``secret``; a :class:`DomainError` subclass on a
    malformed, forged or expired one."""
    if not token or len(token) > MAX_TOKEN_CHARS or token.count(".") != 1:
        raise TokenMalformed()
    encoded_payload, encoded_mac = token.split(".")
    try:
        payload = _unb64(encoded_payload)
        mac = _unb64(encoded_mac)
    except ValueError:
        raise TokenMalformed() from None
    if len(mac) != _MAC_BYTES:
        raise TokenMalformed()
    if not hmac.compare_digest(mac, _mac(secret, payload)):
        raise TokenForged()
    try:
        version, expiry, channel, category, user_id = payload.decode().split("\n")
        expires_at = datetime.fromtimestamp(int(expiry), UTC)
    except (UnicodeDecodeError, ValueError, OverflowError, OSError):
        # Signed by us yet unreadable: only a token of a future format gets here.
        raise TokenMalformed() from None
    if version != VERSION or not (channel and category and user_id):
        raise TokenMalformed()
    if now >= expires_at:
        raise TokenExpired(expires_at)
    return UnsubscribeClaim(user_id, category, channel, expires_at)


def _mac(secret: bytes, payload: bytes) -> bytes:
    return hmac.new(secret, _DOMAIN_SEPARATOR + payload, hashlib.sha256).digest()[:_MAC_BYTES]


def _unb64(text: str) -> bytes:
    if not text:
        raise ValueError("not base64url")
    return unb64url(text)
