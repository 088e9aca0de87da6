"""The in-app inbox (issue 12, item 4): one item per (user, message), stored per user.

An item is ``delivered`` once stored and ``read`` once read (the first ``read_at``
stays). ``seq``, increasing across the store, orders a user's items, pages the list and
is the ``id:`` of the live stream's events, so a client resumes after the last it saw.
"""

from __future__ import annotations

import enum
import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from tepat.domain.errors import DomainError

# SQLite's INTEGER and Mongo's int64 both hold it; anything larger is not a seq we issued.
MAX_SEQ = 2**63 - 1


class InboxStatus(enum.StrEnum):
    DELIVERED = "delivered"
    READ = "read"


@dataclass(frozen=True, slots=True)
class InboxItem:
    item_id: str
    user_id: str
    message_id: str
    category: str
    title: str
    body: str
    created_at: datetime
    event_type: str | None = None
    html: str | None = None
    link: str | None = None
    data: Mapping[str, Any] = field(default_factory=dict)
    read_at: datetime | None = None
    seq: int = 0  # 0 until stored

    @property
    def status(self) -> InboxStatus:
        return InboxStatus.DELIVERED if self.read_at is None else InboxStatus.READ


def inbox_item_id(user_id: str, message_id: str) -> str:
    """Derived from what makes an item unique, so concurrent deliveries of one message
    compute the same id and the store's unique index keeps one."""
    digest = hashlib.sha256(f"{user_id}\x00{message_id}".encode()).hexdigest()
    return f"inb_{digest[:32]}"


def parse_seq(value: object, field: str) -> int:
    """A seq the client got from us (a cursor, ``Last-Event-ID``): a decimal integer >= 0."""
    if isinstance(value, int) and not isinstance(value, bool):
        number = value
    elif isinstance(value, str) and value.isascii() and value.isdigit() and len(value) <= 19:
        number = int(value)
    else:
        raise DomainError(field, "expected a non-negative integer this API returned")
    if not 0 <= number <= MAX_SEQ:
        raise DomainError(field, "out of range")
    return number


_LINK = re.compile(r"^(/|[A-Za-z][A-Za-z0-9+.-]*:)")
# Links a client opens on tap: never script or local content.
_UNSAFE_SCHEMES = frozenset({"javascript", "vbscript", "data", "file"})


def check_link(value: str, field: str = "link") -> str:
    """A URL (``https:``, an app scheme) or a path starting with ``/``, as templates allow."""
    link = value.strip()
    scheme = link.split(":", 1)[0].lower() if ":" in link else ""
    if not _LINK.match(link) or scheme in _UNSAFE_SCHEMES:
        raise DomainError(field, "must be a URL or a path starting with '/'")
    return link
