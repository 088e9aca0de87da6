"""The creator job: plan reminders into pending messages (published through the outbox).

Idempotent: message ids and keys are deterministic and the unique indexes refuse a
second copy, so overlapping runs create nothing new. Incremental: each user's planning
mark says which nominal instants are planned from their current records; a run reads
only the users whose mark does not cover its window. Marks only save work.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import astuple, dataclass
from datetime import datetime, timedelta
from typing import Protocol

from tepat.clock import Clock
from tepat.domain.categories import Categories
from tepat.domain.models import Message, MessageStatus, Reminder, SkipReason, User
from tepat.domain.planning import (
    intended_on,
    next_nominal_from,
    plan_user,
    planning_fingerprint,
    same_intent,
    still_placed,
)
from tepat.ports.repositories.messages import MessageRepository
from tepat.ports.repositories.meta import MetaRepository
from tepat.ports.repositories.reminders import ReminderRepository
from tepat.ports.repositories.replan import ReplanRepository
from tepat.ports.repositories.users import PlanMark, PlanTarget, UserRepository
from tepat.services.outbox import Outbox


@dataclass(frozen=True, slots=True)
class PlanResult:
    created: int = 0
    existing: int = 0
    cancelled: int = 0
    # Users a plan run read and planned (the others' marks covered the window).
    users_planned: int = 0

    def __add__(self, other: PlanResult) -> PlanResult:
        return PlanResult(*(a + b for a, b in zip(astuple(self), astuple(other), strict=True)))


@dataclass(frozen=True, slots=True)
class _PlannedPage:
    targets: Sequence[PlanTarget]
    messages: list[Message]
    marks: list[PlanMark]
    now: datetime


#: Called after each page of users: (users in the page, total so far).
PlanProgress = Callable[[int, PlanResult], None]


class PlanningRecords(
    UserRepository,
    ReminderRepository,
    MessageRepository,
    MetaRepository,
    ReplanRepository,
    Protocol,
): ...


@dataclass(eq=False)
class Creator:
    store: PlanningRecords
    outbox: Outbox
    categories: Categories
    clock: Clock
    horizon: timedelta = timedelta(hours=48)
    page_size: int = 1000

    async def plan_window(
        self,
        start: datetime,
        end: datetime,
        *,
        publish: bool = True,
        progress: PlanProgress | None = None,
        after: str = "",
        until: str | None = None,
    ) -> PlanResult:
        """Plan every enabled reminder whose nominal instant falls in ``[start, end)``
        (of the users whose id is in ``(after, until]``), in pages of users whose mark does
        not cover the window. ``publish`` off: a ``tepat plan`` process beside an embedded
        broker it cannot reach leaves publishing to that one's outbox loop.
        """
        if end <= start:
            raise ValueError("end must be after start")
        total = PlanResult()
        fingerprint = planning_fingerprint(self.categories)
        pages = self.store.users_to_plan(
            start, end, fingerprint, self.page_size, after=after, until=until
        )

        # Page k is planned (CPU) while page k-1 is written (the store's thread, without
        # the GIL); page k is read first, so the read does not queue behind the write.
        async def write(page: _PlannedPage) -> None:
            nonlocal total
            total += await self._write_page(page, publish)
            if progress is not None:
                progress(len(page.targets), total)

        ready: _PlannedPage | None = None
        writing: asyncio.Task[None] | None = None
        try:
            async for targets in pages:
                plan = await self._read_page(targets, start, end, fingerprint)
                if ready is not None:
                    writing = asyncio.ensure_future(write(ready))
                ready = plan()
                if writing is not None:
                    await writing
                    writing = None
            if ready is not None:
                await write(ready)
        finally:
            if writing is not None and not writing.done():
                await asyncio.wait([writing])  # its rows and marks land either way
        if publish:
            await self.outbox.flush()
        return total

    async def _read_page(
        self, targets: Sequence[PlanTarget], start: datetime, end: datetime, fingerprint: str
    ) -> Callable[[], _PlannedPage]:
        """Read a page's reminders; returns the (CPU-only) planning of the page."""
        enabled = [t.user.user_id for t in targets if t.user.enabled]
        # Read after the users (and their stamps): a reminder written since either
        # is read here or bumps the stamp, so the page's marks are refused.
        reminders = await self.store.reminders_for_users(enabled) if enabled else {}

        def plan() -> _PlannedPage:
            now = self.clock.now()
            planned: list[Message] = []
            marks: list[PlanMark] = []
            for t in targets:
                own = reminders.get(t.user.user_id, [])
                if t.user.enabled:
                    begin = _plan_from(t, start, fingerprint)
                    planned.extend(plan_user(t.user, own, self.categories, begin, end, now))
                marks.append(plan_mark(t, own, self.categories, start, end, fingerprint, now))
            return _PlannedPage(targets, planned, marks, now)

        return plan

    async def _write_page(self, page: _PlannedPage, publish: bool) -> PlanResult:
        created: Sequence[Message] = []
        existing = 0
        if page.messages:
            result = await self.store.insert_messages(page.messages)
            created, existing = result.created, result.existing
            # A long planning run must not hold messages due soon past their instant.
            if publish and any(m.due < page.now + PUBLISH_SOON for m in created):
                await self.outbox.flush()
        # Only once the messages are written: a crash before leaves the old marks.
        await self.store.set_plan_marks(page.marks)
        return PlanResult(len(created), existing, users_planned=len(page.targets))

    async def plan_ahead(self) -> PlanResult:
        now = self.clock.now()
        return await self.plan_window(now, now + self.horizon)

    async def replan_user(self, user_id: str, reason: str = SkipReason.SUPERSEDED) -> PlanResult:
        """Re-plan one user after a change to their zone, quiet hours or reminders, by
        replacements, never deletions:

        1. take a new plan version (atomic: overlapping re-plans never share one, so
           their dedup keys never collide), and read the user and reminders after it;
        2. compare each pending message of an older version with what its reminder
           intends now for its local date: keep it if unchanged, else cancel it and plan
           the replacement (a newer version's message is a later re-plan's);
        3. plan the horizon at the new version and write the mark (a local date still
           held by a kept, claimed or sent message is refused by its live key);
        4. repeat 2: a slower concurrent re-plan may have written an older plan since.
        """
        start = await self.store.start_replan(user_id)
        if start is None:
            return PlanResult()
        user, version = start.target.user, start.version
        reminders = {r.reminder_id: r for r in start.reminders}
        now = self.clock.now()
        total = await self._reconcile(user, reminders, version, reason, now, start.pending)
        own = list(reminders.values())
        planned = list(plan_user(user, own, self.categories, now, now + self.horizon, now))
        # The horizon is planned from this version's reads: say so, unless a newer
        # change (a later stamp) came meanwhile; the next plan run then plans it.
        fingerprint = planning_fingerprint(self.categories)
        mark = plan_mark(
            start.target, own, self.categories, now, now + self.horizon, fingerprint, now
        )
        result, pending = await self.store.finish_replan(user_id, planned, mark)
        total += PlanResult(len(result.created), result.existing)
        total += await self._reconcile(user, reminders, version, reason, now, pending)
        # Only what is due within seconds: the publisher loop batches the rest with the
        # other re-plans of its second; nothing due that soon skips the flush's read.
        soon = now + self.outbox.publish_soon
        if total.cancelled or any(m.due <= soon for m in planned):
            await self.outbox.flush_soon()
        return total

    async def _reconcile(
        self,
        user: User,
        reminders: dict[str, Reminder],
        version: int,
        reason: str,
        now: datetime,
        pending: Sequence[Message],
    ) -> PlanResult:
        """Cancel each of the user's ``pending`` messages of an older version that its
        reminder no longer intends, and plan its replacement."""
        cancelled = 0
        replacements: list[Message] = []
        for m in pending:
            if m.reminder_id is None or m.plan_version >= version or m.local_date is None:
                continue  # a one-off, or this re-plan's own message, or a newer one's
            reminder = reminders.get(m.reminder_id)
            expected = intended_on(user, reminder, self.categories, m.local_date, now)
            if expected is not None and same_intent(expected, m) and still_placed(expected, m, now):
                continue  # still right (e.g. deferred past quiet hours that still hold)
            cancel_reason = reason
            if expected is not None and expected.nominal < now and expected.nominal != m.nominal:
                expected = None  # moved to an instant that has already passed
                cancel_reason = f"{reason}: new time already passed"
            if await self.store.transition(
                m.id,
                MessageStatus.CANCELLED,
                now,
                expect=[MessageStatus.PENDING],
                reason=cancel_reason,
                release_live_key=True,
            ):
                cancelled += 1
                if expected is not None:
                    replacements.append(expected)
        created = 0
        if replacements:
            result = await self.store.insert_messages(replacements)
            created = len(result.created)
        return PlanResult(created=created, cancelled=cancelled)

    async def replan_if_tzdata_changed(self, release: str) -> PlanResult | None:
        """Re-plan every user's pending messages when the tz database release changed
        (zone rules change between releases: old plans would fire at the wrong local time).

        The release is recorded once every user is re-planned; progress is kept per user,
        so a restart resumes where it stopped. Each user is re-planned from fresh reads,
        never from a snapshot that could undo a concurrent edit.
        """
        previous = await self.store.get_meta(TZDATA_META_KEY)
        if previous == release:
            return None
        if previous is None:
            # A new store: everything in it was planned with this release.
            await self.store.set_meta(TZDATA_META_KEY, release)
            return None
        progress_key = f"{TZDATA_PROGRESS_KEY}:{release}"
        done_up_to = await self.store.get_meta(progress_key) or ""
        total = PlanResult()
        async for users in self.store.iter_users(self.page_size):
            for user in users:
                if user.user_id <= done_up_to:
                    continue
                total += await self.replan_user(user.user_id, reason="superseded:tzdata")
            if users:
                await self.store.set_meta(progress_key, users[-1].user_id)
        await self.store.set_meta(TZDATA_META_KEY, release)
        return total


def plan_mark(
    target: PlanTarget,
    reminders: Sequence[Reminder],
    categories: Categories,
    start: datetime,
    end: datetime,
    fingerprint: str,
    now: datetime,
) -> PlanMark:
    """What is planned for ``target`` once ``[start, end)`` is: that window up to
    the first instant at or after ``end`` that nothing planned yet, joined with
    the standing mark when the two touch."""
    user = target.user
    nxt = next_nominal_from(user, reminders, categories, end, now)
    lo, hi = start, nxt
    old = _standing(target, fingerprint)
    if old is not None and start <= old.plan_next_at and old.plan_from <= nxt:
        lo, hi = min(lo, old.plan_from), max(hi, old.plan_next_at)
    return PlanMark(user.user_id, target.stamp, lo, hi, fingerprint)


def _standing(target: PlanTarget, fingerprint: str) -> PlanMark | None:
    """The user's mark if it still counts (the store drops it at any change)."""
    mark = target.mark
    if mark is None or mark.fingerprint != fingerprint or mark.stamp != target.stamp:
        return None
    return mark


def _plan_from(target: PlanTarget, start: datetime, fingerprint: str) -> datetime:
    """Where this user's window really starts: what their mark covers from ``start``
    on is planned already."""
    mark = _standing(target, fingerprint)
    if mark is not None and mark.plan_from <= start < mark.plan_next_at:
        return mark.plan_next_at
    return start


TZDATA_META_KEY = "tzdata_release"
TZDATA_PROGRESS_KEY = "tzdata_replan_done_up_to"
# Messages due sooner than this are published during a planning run, not after it.
PUBLISH_SOON = timedelta(minutes=5)
