"""Cursor pages for the small lists (a user's devices, reminders and contacts; templates;
webhook subscriptions): ``?limit=`` (capped) and ``?cursor=`` (the ``next_cursor`` of the
previous page), in the order of each item's unique key.

These lists are bounded (quotas per user, operator-made templates and subscriptions),
so the page is cut from the store's whole list here; the long lists (messages, inbox,
suppressions) page in the store.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Annotated, TypeVar

from fastapi import Depends, Query

from tepat.domain.b64url import b64url, unb64url
from tepat.domain.errors import DomainError

MAX_LIMIT = 200
DEFAULT_LIMIT = 100

# Also the long lists' cursor (their store's own, as opaque to the client).
Cursor = Annotated[
    str | None, Query(max_length=512, description="`next_cursor` of the previous page")
]

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class PageQuery:
    """``?limit=&cursor=`` of a small list, and the page they cut from it."""

    limit: int
    cursor: str | None

    def cut(self, items: Iterable[T], key: Callable[[T], str]) -> tuple[list[T], str | None]:
        """The ``limit`` items after ``cursor`` in ``key`` order, and the next page's
        cursor (None on the last page)."""
        ordered = sorted(items, key=key)
        if self.cursor:
            after = _decode(self.cursor)
            ordered = [item for item in ordered if key(item) > after]
        page = ordered[: self.limit]
        return page, b64url(key(page[-1]).encode()) if len(ordered) > self.limit else None


def _page_query(
    limit: Annotated[
        int, Query(ge=1, le=MAX_LIMIT, description=f"Page size (at most {MAX_LIMIT})")
    ] = DEFAULT_LIMIT,
    cursor: Cursor = None,
) -> PageQuery:
    return PageQuery(limit, cursor)


Page = Annotated[PageQuery, Depends(_page_query)]


def _decode(cursor: str) -> str:
    try:
        key = unb64url(cursor).decode()
    except ValueError:  # binascii.Error and UnicodeDecodeError are ValueErrors
        key = ""
    if not key:  # every page ends at an item, and no key is empty
        raise DomainError("cursor", "not a cursor this API returned")
    return key
