"""A message for tests that need one: every field the dataclass requires filled in, so a
test names only what it is about."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime
from typing import Any

from tepat.domain.models import Message, message_id_for

AT = datetime(2027, 3, 14, 7, 30, tzinfo=UTC)


def make_message(dedup_key: str, **fields: Any) -> Message:
    """A pending push message to ``u1`` at ``AT``; ``fields`` override any field.

    The id derives from ``dedup_key`` (as the planner derives it) unless given.
    """
    base = Message(
        id=message_id_for(dedup_key),
        user_id="u1",
        category="meal",
        label="",
        title="t",
        body="b",
        scheduled_at=AT,
        timezone="UTC",
        dedup_key=dedup_key,
        live_key=None,
    )
    return dataclasses.replace(base, **fields)


def email_message(mid: str, title: str, body: str, html: str | None, at: datetime) -> Message:
    """An email to ``u1`` about an order; ``html`` is its HTML part (None: text only)."""
    return make_message(
        f"k-{mid}",
        id=mid,
        category="orders",
        title=title,
        body=body,
        scheduled_at=at,
        channel="email",
        content={"html": html} if html else {},
    )
