"""Counting a chaos run: lost, duplicated (inside and outside the documented window), stuck.

Three sources: the store (each message's final status and reason, the tickets it
recorded), the sandbox's log of every notification it accepted (one entry per copy,
with the ticket it issued) and the instants the bench killed a consumer.

* **stuck**: still ``pending`` or ``sending`` at the end of the bounded wait.
* **closed_outcome_unknown**: ``failed`` with reason ``outcome_unknown``: the
  provider's answer was lost after the request went out and the category's
  ``maybe_sent`` policy is ``close``. Honest, not lost (the copy may have arrived).
* **lost**: neither received nor stuck nor closed as ``outcome_unknown`` (a message
  recorded ``sent`` that the sandbox never received is lost too).
* **duplicates**: every copy beyond the first. A copy is *inside the window* when its
  ticket was never recorded in the store (the provider accepted it and the answer
  never reached a record) and either its category retries maybe-sent requests, or a
  consumer was killed after it arrived, or the provider answered its request with a
  5xx after accepting it (the sandbox marks it ``answer_lost: error``; Tepat retries a
  5xx for every category, as Expo documents): the three windows ``docs/ARCHITECTURE.md``
  documents. Any other copy is a duplicate outside the window: a failure.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from bench.chaos_store import ChaosStore, MessageRow
from bench.report import Correctness
from tepat.domain.categories import OUTCOME_UNKNOWN, Categories, MaybeSentPolicy

UNFINISHED = ("pending", "sending")
SAMPLE = 5


@dataclass
class ChaosCorrectness(Correctness):
    """``duplicates`` counts copies outside the documented window only."""

    window_duplicates: int = 0
    stuck: int = 0
    closed_outcome_unknown: int = 0

    @property
    def ok(self) -> bool:
        return self.lost == 0 and self.stuck == 0 and self.duplicates == 0

    def as_dict(self) -> dict[str, Any]:
        return {
            "expected": self.expected,
            "lost": self.lost,
            "duplicates": self.duplicates,
            "window_duplicates": self.window_duplicates,
            "stuck": self.stuck,
            "closed_outcome_unknown": self.closed_outcome_unknown,
            "sent": self.sent,
            "ok": self.ok,
            **self.details,
        }


def _store(store: ChaosStore) -> tuple[dict[str, MessageRow], set[str]]:
    by_id = store.messages()
    tickets = store.recorded_tickets() | {r.ticket_id for r in by_id.values() if r.ticket_id}
    return by_id, tickets


def tally(
    store: ChaosStore,
    categories_of: Mapping[str, str],
    received: Sequence[dict[str, Any]],
    categories: Categories,
    kills: Sequence[datetime] = (),
    known: Collection[str] = (),
) -> ChaosCorrectness:
    """Count the messages ``categories_of`` names (id -> category); a copy of an id that is
    neither one of them nor ``known`` (another cohort's) is a stranger: a duplicate."""
    rows, recorded = _store(store)
    copies: dict[str, list[tuple[datetime, str]]] = defaultdict(list)
    answered_5xx: set[str] = set()  # tickets of requests the provider answered 5xx
    strangers = 0
    for r in received:
        if r.get("status") != "ok":
            continue
        mid = str((r.get("data") or {}).get("tepat_message_id", ""))
        if mid not in categories_of:
            strangers += mid not in known
            continue
        copies[mid].append((datetime.fromisoformat(str(r["received_at"])), str(r["ticket_id"])))
        if r.get("answer_lost") == "error":
            answered_5xx.add(str(r["ticket_id"]))
    lost = stuck = unknown = window = outside = sent = 0
    statuses: Counter[str] = Counter()
    odd: Counter[str] = Counter()  # received, yet recorded as something other than sent
    samples: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for mid, category in categories_of.items():
        row = rows.get(mid)
        got = sorted(copies.get(mid, []))
        status = row.status if row else "absent"
        statuses[status] += 1
        if status in ("sent", "delivered"):
            sent += 1
        if status in UNFINISHED:
            stuck += 1
            kind = "stuck"
        elif row and status == "failed" and row.reason == OUTCOME_UNKNOWN:
            unknown += 1
            kind = ""
        elif not got:
            lost += 1
            kind = "lost"
        else:
            kind = ""
            if status not in ("sent", "delivered"):
                odd[f"received_but_{status}"] += 1
        extra = max(0, len(got) - 1)
        if extra:
            retries = categories.get(category).maybe_sent is MaybeSentPolicy.RETRY
            explained = sum(
                1
                for at, ticket in got
                if ticket not in recorded
                and (retries or ticket in answered_5xx or any(k >= at for k in kills))
            )
            inside = min(extra, explained)
            window += inside
            outside += extra - inside
            if extra > inside:
                kind = "duplicate"
        if kind and len(samples[kind]) < SAMPLE:
            samples[kind].append(_sample(mid, category, row, got, recorded))
    details: dict[str, Any] = {
        "received_at_least_once": sum(1 for m in categories_of if copies.get(m)),
        "statuses": dict(statuses),
        **odd,
    }
    if strangers:
        details["copies_of_unknown_ids"] = strangers
    details.update({f"{k}_sample": v for k, v in samples.items()})
    return ChaosCorrectness(
        expected=len(categories_of),
        sent=sent,
        duplicates=outside + strangers,
        lost=lost,
        details=details,
        window_duplicates=window,
        stuck=stuck,
        closed_outcome_unknown=unknown,
    )


def _sample(
    mid: str,
    category: str,
    row: MessageRow | None,
    got: list[tuple[datetime, str]],
    recorded: set[str],
) -> dict[str, Any]:
    """One message's story, for the report of a failure."""
    return {
        "id": mid,
        "category": category,
        "status": row.status if row else None,
        "reason": row.reason if row else None,
        "attempts": row.attempts if row else None,
        "last_error": (row.last_error or "")[:200] if row else None,
        "copies": [
            {"received_at": at.isoformat(), "ticket_recorded": ticket in recorded}
            for at, ticket in got
        ],
    }
