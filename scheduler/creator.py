"""The creator job: plan reminders into pending messages, then enqueue them.

Idempotent by construction: message ids and keys are deterministic and the
store's unique indexes refuse a second copy, so running a window twice, or two
jobs at once over overlapping windows, creates nothing new.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from tepat.clock import Clock
from tepat.domain.categories import Categories
from tepat.domain.models import SkipReason
from tepat.domain.planning import plan_users
from tepat.ports.store import Store
from tepat.services.enqueue import Enqueuer


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


class Creator:
    def __init__(
        self,
        store: Store,
        enqueuer: Enqueuer,
        categories: Categories,
        clock: Clock,
        horizon: timedelta = timedelta(hours=48),
        page_size: int = 1000,
    ) -> None:
        self._store = store
        self._enqueuer = enqueuer
        self._categories = categories
        self._clock = clock
        self.horizon = horizon
        self._page_size = page_size

    async def plan_window(self, start: datetime, end: datetime) -> PlanResult:
        """Plan every enabled reminder whose nominal instant falls in ``[start, end)``.

        Users stream in pages, so memory stays flat however many there are.
        """
        if end <= start:
            raise ValueError("end must be after start")
        total = PlanResult()
        batches = self._enqueuer.collector()
        async for users in self._store.iter_users(self._page_size):
            enabled = [u for u in users if u.enabled]
            if not enabled:
                continue
            reminders = await self._store.reminders_for_users([u.user_id for u in enabled])
            pairs = ((u, reminders.get(u.user_id, [])) for u in enabled)
            now = self._clock.now()
            planned = list(plan_users(pairs, self._categories, start, end, now))
            if not planned:
                continue
            result = await self._store.insert_messages(planned)
            await batches.add(result.created)
            total += PlanResult(len(result.created), result.existing)
        await batches.flush()
        return total

    async def plan_ahead(self) -> PlanResult:
        """The scheduled job: from now to now + horizon."""
        now = self._clock.now()
        return await self.plan_window(now, now + self.horizon)

    async def replan_user(
        self, user_id: str, reminder_id: str | None = None, reason: str = SkipReason.SUPERSEDED
    ) -> PlanResult:
        """Cancel the user's pending future messages (one reminder's, if given) and plan again.

        Cancelling releases each message's live key, so the same local date can be
        planned anew; a local date already sent keeps its key and is not planned twice.
        """
        now = self._clock.now()
        cancelled = await self._store.cancel_pending(
            user_id, after=now, now=now, reason=reason, reminder_id=reminder_id
        )
        user = await self._store.get_user(user_id)
        if user is None or not user.enabled:
            return PlanResult(cancelled=cancelled)
        reminders = await self._store.list_reminders(user_id)
        if reminder_id is not None:
            reminders = [r for r in reminders if r.reminder_id == reminder_id]
        planned = list(
            plan_users([(user, reminders)], self._categories, now, now + self.horizon, now)
        )
        result = await self._store.insert_messages(planned)
        await self._enqueuer.enqueue(result.created)
        return PlanResult(len(result.created), result.existing, cancelled)

    async def replan_if_tzdata_changed(self, release: str) -> PlanResult | None:
        """Re-plan every user's pending future messages when the tz database release changed.

        Zone rules change between releases (a country drops DST, shifts its offset),
        and messages planned under the old rules would fire at the wrong local time.
        """
        previous = await self._store.get_meta(TZDATA_META_KEY)
        await self._store.set_meta(TZDATA_META_KEY, release)
        if previous is None or previous == release:
            return None
        total = PlanResult()
        async for users in self._store.iter_users(self._page_size):
            for user in users:
                # A new plan version gives the new messages new dedup keys.
                bumped = replace(user, plan_version=user.plan_version + 1)
                await self._store.upsert_user(bumped)
                total += await self.replan_user(user.user_id, reason="superseded:tzdata")
        return total


TZDATA_META_KEY = "tzdata_release"
