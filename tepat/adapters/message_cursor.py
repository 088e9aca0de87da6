"""The message-list cursor, one encoding for every store adapter.

A page ends at a message; the next page starts after it in the list's order (newest
``scheduled_at`` first, then the id). The cursor names that position: the instant (UTC, to
the microsecond) and the id, as unpadded URL-safe base64, so a client sees an opaque string.
A cursor that does not decode is the client's error, naming the ``cursor`` field.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

from tepat.domain.b64url import b64url, unb64url
from tepat.domain.errors import DomainError
from tepat.domain.models import Message
from tepat.ports.repositories.messages import MessagePage


def encode_cursor(scheduled_at: datetime, message_id: str) -> str:
    at = scheduled_at.astimezone(UTC).isoformat(timespec="microseconds")
    return b64url(f"{at}|{message_id}".encode())


def decode_cursor(cursor: str) -> tuple[datetime, str]:
    """The position a cursor names: (scheduled_at in UTC, message id)."""
    try:
        raw = unb64url(cursor).decode()
        at, message_id = raw.split("|", 1)
        scheduled_at = datetime.fromisoformat(at)
    except ValueError:  # binascii.Error and UnicodeDecodeError are ValueErrors
        raise DomainError("cursor", "not a cursor this service returned") from None
    if scheduled_at.tzinfo is None:
        raise DomainError("cursor", "not a cursor this service returned")
    return scheduled_at.astimezone(UTC), message_id


def message_page(found: Sequence[Message], limit: int) -> MessagePage:
    """The page from up to ``limit`` + 1 messages in list order: the extra one only says
    that another page follows, after the last one kept."""
    items = list(found[:limit])
    next_cursor = None
    if len(found) > limit and items:
        next_cursor = encode_cursor(items[-1].scheduled_at, items[-1].id)
    return MessagePage(items=items, next_cursor=next_cursor)
