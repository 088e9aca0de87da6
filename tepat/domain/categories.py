"""Notification categories and the policy each follows."""

from __future__ import annotations

import enum
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import timedelta

from tepat.domain.errors import DomainError


class QuietPolicy(enum.StrEnum):
    DEFER = "defer"  # move to the end of the quiet period (default)
    DROP = "drop"  # do not send; the message ends skipped (quiet_hours)
    BYPASS = "bypass"  # ignore quiet hours


class MaybeSentPolicy(enum.StrEnum):
    """What to do with a message whose provider request may have been accepted
    (``TryAgain.maybe_sent``: the notification may already be on the phone).

    ``close`` is the default: the answer was lost after a whole request, so the provider
    most likely has it. A closed message is not silent: ``failed``/``outcome_unknown``,
    its ``message.failed`` webhook, counted and logged.
    """

    RETRY = "retry"  # send again: a duplicate is better than a missing one (safety)
    CLOSE = "close"  # do not risk a duplicate: the message ends failed (outcome_unknown)


#: ``Message.status_reason`` of a message closed by :attr:`MaybeSentPolicy.CLOSE`.
OUTCOME_UNKNOWN = "outcome_unknown"


@dataclass(frozen=True, slots=True)
class CategoryPolicy:
    name: str
    quiet_hours: QuietPolicy = QuietPolicy.DEFER
    missed_window: timedelta = timedelta(minutes=30)
    queue: str = ""
    # Lower drains first when several categories are due at once (safety first).
    priority: int = 5
    maybe_sent: MaybeSentPolicy = MaybeSentPolicy.CLOSE

    @property
    def queue_name(self) -> str:
        return self.queue or f"tepat.{self.name}"


DEFAULT_CATEGORIES: tuple[CategoryPolicy, ...] = (
    CategoryPolicy(
        "safety", quiet_hours=QuietPolicy.BYPASS, priority=0, maybe_sent=MaybeSentPolicy.RETRY
    ),
    CategoryPolicy("meal"),
    CategoryPolicy("mood"),
    CategoryPolicy("hydration"),
    CategoryPolicy("sleep"),
    CategoryPolicy("activity"),
    CategoryPolicy("custom"),
)


def default_maybe_sent(name: str) -> MaybeSentPolicy:
    """The ``maybe_sent`` policy of a category configured without one: the built-in
    category's of that name (configuring ``safety`` must not quietly stop its retries),
    else ``close``."""
    built_in = (p.maybe_sent for p in DEFAULT_CATEGORIES if p.name == name)
    return next(built_in, MaybeSentPolicy.CLOSE)


class Categories:
    """The configured categories, looked up by name."""

    def __init__(self, policies: Iterable[CategoryPolicy] = DEFAULT_CATEGORIES) -> None:
        self._by_name = {p.name: p for p in policies}
        if not self._by_name:
            raise ValueError("at least one category is required")

    def __contains__(self, name: object) -> bool:
        return name in self._by_name

    def __iter__(self) -> Iterator[CategoryPolicy]:
        return iter(self._by_name.values())

    @property
    def names(self) -> list[str]:
        return list(self._by_name)

    def get(self, name: str, field: str = "category") -> CategoryPolicy:
        try:
            return self._by_name[name]
        except KeyError:
            known = ", ".join(sorted(self._by_name))
            raise DomainError(field, f"unknown category {name!r} (known: {known})") from None

    def by_queue(self) -> Mapping[str, CategoryPolicy]:
        return {p.queue_name: p for p in self._by_name.values()}

    def queues(self) -> list[str]:
        """Queue names, highest priority first."""
        return [p.queue_name for p in sorted(self._by_name.values(), key=lambda p: p.priority)]
