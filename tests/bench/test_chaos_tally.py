"""bench/chaos_tally.py: which copies of a message fall inside the documented duplicate
windows (docs/ARCHITECTURE.md, "the duplicate window") and which are failures."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from bench.chaos_store import MessageRow
from bench.chaos_tally import tally
from tepat.domain.categories import Categories

AT = datetime(2027, 3, 1, 9, 0, tzinfo=UTC)


class Store:
    url = "sqlite:///unused"

    def __init__(self, rows: dict[str, MessageRow], recorded: set[str]) -> None:
        self._rows, self._recorded = rows, recorded

    def messages(self) -> dict[str, MessageRow]:
        return self._rows

    def recorded_tickets(self) -> set[str]:
        return self._recorded


def copy(mid: str, ticket: str, seconds: float, **extra: Any) -> dict[str, Any]:
    return {
        "status": "ok",
        "data": {"tepat_message_id": mid},
        "ticket_id": ticket,
        "received_at": (AT + timedelta(seconds=seconds)).isoformat(),
        **extra,
    }


def sent(ticket: str) -> MessageRow:
    return MessageRow("sent", None, ticket, 2, None, False)


def test_a_copy_answered_5xx_after_acceptance_is_inside_the_window_for_any_category() -> None:
    # "mood" closes maybe-sent answers (no retry): only the 5xx window explains its copy.
    store = Store({"m1": sent("t2"), "m2": sent("t4")}, {"t2", "t4"})
    received = [
        copy("m1", "t1", 0, answer_lost="error"),  # accepted, then a 502: Tepat retried
        copy("m1", "t2", 1),
        copy("m2", "t3", 0, answer_lost="drop"),  # a dropped answer: not the 5xx window
        copy("m2", "t4", 1),
    ]
    counted = tally(store, {"m1": "mood", "m2": "mood"}, received, Categories())
    assert counted.window_duplicates == 1
    assert counted.duplicates == 1  # m2's copy: a closing category does not resend a drop
    assert counted.lost == 0
