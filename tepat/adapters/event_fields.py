"""An event's stored fields, written and read back the same way by both stores (``data`` is
JSON text in each, since a caller's keys may hold "." or "$"); instants and counts are each
store's."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from datetime import datetime
from operator import attrgetter
from typing import Any

from tepat.domain.events import Event, EventState
from tepat.domain.routing import Priority
from tepat.domain.validation import format_hhmm, parse_hhmm

EVENT_FIELDS: dict[str, Callable[[Any], Any]] = {
    "priority": Priority,
    "all_users": bool,
    "data": json.loads,
    "local_time": lambda t: None if t is None else parse_hhmm(t, "local_time"),
    "listed": int,
    "state": EventState,
    "recipients": int,
}
STORED_EVENT_FIELDS: dict[str, Callable[[Any], Any]] = {
    "priority": attrgetter("value"),
    "local_time": lambda t: None if t is None else format_hhmm(t),
    "state": attrgetter("value"),
}


def new_event(event: Event, state: EventState, now: datetime) -> Event:
    """``event`` as its creation stores it: in ``state``, no recipient done yet."""
    return dataclasses.replace(
        event, state=state, cursor="", recipients=0, counts={}, created_at=now, updated_at=now
    )
