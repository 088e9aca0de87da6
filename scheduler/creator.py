"""The creator job: plan reminders into pending messages (published through the outbox).

Idempotent by construction: message ids and keys are deterministic and the
store's unique indexes refuse a second copy, so running a window twice, or two
jobs at once over overlapping windows, creates nothing new.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from tepat.clock import Clock
from tepat.domain.categories import Categories
from tepat.domain.models import Message, MessageStatus, Reminder, SkipReason, User
from tepat.domain.planning import intended_on, plan_users, same_intent
from tepat.ports.store import Store
from tepat.services.outbox import Outbox


@dataclass(frozen=True, slots=True)
class PlanResult:
    created: int = 0
    existing: int = 0
    cancelled: int = 0

    def __add__(self, other: PlanResult) -> PlanResult:
        return PlanResult(
            self.created + other.created,
            self.existing + other.existing,
            self.cancelled + other.cancelled,
        )


#: Called after each page of users: (users in the page, total so far).
PlanProgress = Callable[[int, PlanResult], None]


class Creator:
    def __init__(
        self,
        store: Store,
        outbox: Outbox,
        categories: Categories,
        clock: Clock,
        horizon: timedelta = timedelta(hours=48),
        page_size: int = 1000,
    ) -> None:
        self._store = store
        self._outbox = outbox
        self._categories = categories
        self._clock = clock
        self.horizon = horizon
        self._page_size = page_size

    async def plan_window(
        self,
        start: datetime,
        end: datetime,
        *,
        publish: bool = True,
        progress: PlanProgress | None = None,
    ) -> PlanResult:
        """Plan every enabled reminder whose nominal instant falls in ``[start, end)``.

        Users stream in pages, so memory stays flat however many there are. The
        messages go to the outbox in the same write; unless ``publish`` is off (a
        ``tepat plan`` process beside an embedded broker it cannot reach, whose
        own outbox loop will publish them), the outbox publishes the ones due
        soon as the run goes and once more at the end. ``progress``, if given,
        hears after each page how many users it held and the total so far.
        """
        if end <= start:
            raise ValueError("end must be after start")
        total = PlanResult()
        async for users in self._store.iter_users(self._page_size):
            total += await self._plan_page(users, start, end, publish)
            if progress is not None:
                progress(len(users), total)
        if publish:
            await self._outbox.flush()
        return total

    async def _plan_page(
        self, users: Sequence[User], start: datetime, end: datetime, publish: bool
    ) -> PlanResult:
        enabled = [u for u in users if u.enabled]
        if not enabled:
            return PlanResult()
        reminders = await self._store.reminders_for_users([u.user_id for u in enabled])
        pairs = ((u, reminders.get(u.user_id, [])) for u in enabled)
        now = self._clock.now()
        planned = list(plan_users(pairs, self._categories, start, end, now))
        if not planned:
            return PlanResult()
        result = await self._store.insert_messages(planned)
        if publish and self._outbox_backlog_due_soon(result.created, now):
            await self._outbox.flush()
        return PlanResult(len(result.created), result.existing)

    @staticmethod
    def _outbox_backlog_due_soon(created: Sequence[Message], now: datetime) -> bool:
        # A long planning run must not hold messages due soon past their instant.
        return any(m.due < now + PUBLISH_SOON for m in created)

    async def plan_ahead(self) -> PlanResult:
        """The scheduled job: from now to now + horizon."""
        now = self._clock.now()
        return await self.plan_window(now, now + self.horizon)

    async def replan_user(self, user_id: str, reason: str = SkipReason.SUPERSEDED) -> PlanResult:
        """Re-plan one user after a change to their zone, quiet hours or reminders.

        Re-plans are replacements, never deletions. Steps:

        1. take a new plan version from the store (atomic: two overlapping
           re-plans, a client's retried PUT, never share one, so their dedup keys
           never collide);
        2. read the user and reminders *after* that, so the newest version has
           read the newest state;
        3. compare each pending message of an older version with what its
           reminder intends now for the same local date (by its nominal instant,
           not a deferred ``scheduled_at``): keep it if unchanged, else cancel it
           and plan the replacement (or record why none is due). A message of a
           newer version belongs to a later re-plan and is left alone;
        4. plan the horizon ahead at the new version; a local date still held by
           a kept, claimed or sent message is refused by its live key;
        5. repeat 3 once more: a slower concurrent re-plan may have written an
           older plan after step 3 read.
        """
        version = await self._store.next_plan_version(user_id)
        user = await self._store.get_user(user_id)
        if user is None:
            return PlanResult()
        reminders = {r.reminder_id: r for r in await self._store.list_reminders(user_id)}
        now = self._clock.now()
        total = await self._reconcile(user, reminders, version, reason, now)
        if user.enabled:
            planned = list(
                plan_users(
                    [(user, list(reminders.values()))],
                    self._categories,
                    now,
                    now + self.horizon,
                    now,
                )
            )
            result = await self._store.insert_messages(planned)
            total += PlanResult(len(result.created), result.existing)
        total += await self._reconcile(user, reminders, version, reason, now)
        await self._outbox.flush_quietly()
        return total

    async def _reconcile(
        self,
        user: User,
        reminders: dict[str, Reminder],
        version: int,
        reason: str,
        now: datetime,
    ) -> PlanResult:
        cancelled = 0
        replacements: list[Message] = []
        for m in await self._store.pending_for_user(user.user_id):
            if m.reminder_id is None or m.plan_version >= version or m.local_date is None:
                continue  # a one-off, or this re-plan's own message, or a newer one's
            reminder = reminders.get(m.reminder_id)
            expected = (
                intended_on(user, reminder, self._categories, m.local_date, now)
                if reminder is not None
                else None
            )
            if expected is not None and same_intent(expected, m):
                continue  # still right (e.g. deferred past quiet hours): keep it
            cancel_reason = reason
            if expected is not None and expected.nominal < now and expected.nominal != m.nominal:
                expected = None  # moved to an instant that has already passed
                cancel_reason = f"{reason}: new time already passed"
            if await self._store.transition(
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
            result = await self._store.insert_messages(replacements)
            created = len(result.created)
        return PlanResult(created=created, cancelled=cancelled)

    async def replan_if_tzdata_changed(self, release: str) -> PlanResult | None:
        """Re-plan every user's pending messages when the tz database release changed.

        Zone rules change between releases (a country drops DST, shifts its offset),
        and messages planned under the old rules would fire at the wrong local time.
        The new release is recorded only once every user is re-planned; progress is
        kept per user, so a failure or restart part-way resumes where it stopped.
        Each user is re-planned from fresh reads (``replan_user``), never from a
        snapshot that could undo a concurrent edit.
        """
        previous = await self._store.get_meta(TZDATA_META_KEY)
        if previous == release:
            return None
        if previous is None:
            # A new store: everything in it was planned with this release.
            await self._store.set_meta(TZDATA_META_KEY, release)
            return None
        progress_key = f"{TZDATA_PROGRESS_KEY}:{release}"
        done_up_to = await self._store.get_meta(progress_key) or ""
        total = PlanResult()
        async for users in self._store.iter_users(self._page_size):
            for user in users:
                if user.user_id <= done_up_to:
                    continue
                total += await self.replan_user(user.user_id, reason="superseded:tzdata")
            if users:
                await self._store.set_meta(progress_key, users[-1].user_id)
        await self._store.set_meta(TZDATA_META_KEY, release)
        return total


TZDATA_META_KEY = "tzdata_release"
TZDATA_PROGRESS_KEY = "tzdata_replan_done_up_to"
# Messages due sooner than this are published during a planning run, not after it.
PUBLISH_SOON = timedelta(minutes=5)
