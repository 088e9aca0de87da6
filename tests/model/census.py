"""What a run of the model test exercised: its expectations counted by kind.

Every example's model ends with one expectation per intent it decided on (a
reminder's local date, a one-off, an event's (user, channel)). The census adds
them up over the whole run, so that the run can say what it tested and fail
when daily reminders, the core of the product, are not a large part of it.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import date

from tests.model.reference import Expectation, Model, local_time_kind, offset_changes_on

DAILY = "daily reminder"
KINDS = {"r": DAILY, "o": "one-off", "e": "event"}
#: The share of the expectations that must be daily reminders (issue 18, item 9).
DAILY_SHARE = 1 / 3
#: Below this many examples the share is left unjudged (a developer's short run swings
#: with Hypothesis's choice of rules per example); the default run has 130.
JUDGED_FROM = 50
#: Every census report of this session, printed at its end (tests/model/conftest.py).
REPORTS: list[str] = []


@dataclass
class Census:
    examples: int = 0
    kinds: Counter[str] = field(default_factory=Counter)
    # What the daily reminders met: DST, edits, quiet hours, deletes (a reminder's
    # expectation can count under several of these).
    daily: Counter[str] = field(default_factory=Counter)
    zones: set[str] = field(default_factory=set)  # zones a daily reminder fired in

    def take(self, model: Model) -> None:
        """Count the expectations of one finished example."""
        self.examples += 1
        for e in model.expectations.values():
            self.kinds[KINDS[e.key[0]]] += 1
            if e.key[0] == "r":
                self._daily(e)

    def _daily(self, e: Expectation) -> None:
        day = date.fromisoformat(e.key[3])
        self.zones.add(e.tz)
        facts = [f"verdict {e.verdict.value if e.verdict else 'pending'}"]
        if e.reason:
            facts.append(f"not sent: {e.reason}")
        if offset_changes_on(day, e.tz):
            facts.append("on a day the zone changes its offset")
        kind = local_time_kind(day, e.local_at, e.tz)
        if kind:
            facts.append(f"local time {kind}")
        if e.deferred:
            facts.append("deferred by quiet hours")
        if e.generation != (1, 0):
            facts.append("after an edit, delete or recreate, or a zone change")
        self.daily.update(facts)

    @property
    def total(self) -> int:
        return sum(self.kinds.values())

    def report(self, title: str) -> list[str]:
        total = self.total or 1
        lines = [f"{title}: {self.total} expectations in {self.examples} examples"]
        for kind, n in self.kinds.most_common():
            lines.append(f"  {kind:<16} {n:>6}  {100 * n / total:5.1f} %")
        lines.append(f"  daily reminders fired in {len(self.zones)} zones; they met:")
        for fact, n in sorted(self.daily.items()):
            lines.append(f"    {fact:<44} {n:>6}")
        return lines

    def check(self) -> None:
        """Fail a run without expectations (it proves nothing), and a run of at least
        JUDGED_FROM examples in which daily reminders are under DAILY_SHARE of them."""
        daily = self.kinds[DAILY]
        if self.examples == 0 or self.total == 0:
            raise AssertionError("the model test ran no example with an expectation")
        if self.examples < JUDGED_FROM:
            return
        if daily == 0 or daily < DAILY_SHARE * self.total:
            raise AssertionError(
                f"daily reminders are {daily} of {self.total} expectations in "
                f"{self.examples} examples: less than {DAILY_SHARE:.0%}; the model test "
                f"no longer exercises the core product ({dict(self.kinds)})"
            )
