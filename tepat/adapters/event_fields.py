"""An event's stored fields read back the same way by both stores (``data`` is JSON text in
each, since a caller's keys may hold "." or "$"); instants and counts are each store's."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from tepat.domain.events import EventState
from tepat.domain.routing import Priority
from tepat.domain.validation import parse_hhmm

EVENT_FIELDS: dict[str, Callable[[Any], Any]] = {
    "priority": Priority,
    "all_users": bool,
    "data": json.loads,
    "local_time": lambda t: None if t is None else parse_hhmm(t, "local_time"),
    "listed": int,
    "state": EventState,
    "recipients": int,
}
