"""A user's re-plan (``ReplanRepository``) as the single-record methods one after the
other: MongoDB has no multi-document transaction on a standalone server. The version's
findAndModify returns the whole user, so the plan target needs no read of its own."""

from __future__ import annotations

from collections.abc import Sequence

from pymongo import ReturnDocument

from tepat.adapters.mongo.messages import MessagesMixin
from tepat.adapters.mongo.reminders import RemindersMixin
from tepat.adapters.mongo.users import PLAN_CHANGED, UsersMixin, _plan_target
from tepat.domain.models import Message
from tepat.ports.repositories.messages import InsertResult
from tepat.ports.repositories.replan import ReplanStart
from tepat.ports.repositories.users import PlanMark


class ReplanMixin(UsersMixin, RemindersMixin, MessagesMixin):
    async def start_replan(self, user_id: str) -> ReplanStart | None:
        # One findAndModify: atomic, and it returns the value this call made, so two
        # concurrent re-plans never read the same version. No upsert: a user that does
        # not exist has nothing to re-plan.
        doc = await self._db["users"].find_one_and_update(
            {"_id": user_id},
            {"$inc": {"plan_version": 1, "plan_stamp": 1}, "$unset": PLAN_CHANGED["$unset"]},
            return_document=ReturnDocument.AFTER,
        )
        if doc is None:
            return None
        reminders = await self.list_reminders(user_id)
        pending = await self.pending_for_user(user_id)
        return ReplanStart(int(doc["plan_version"]), _plan_target(doc), reminders, pending)

    async def finish_replan(
        self, user_id: str, planned: Sequence[Message], mark: PlanMark
    ) -> tuple[InsertResult, list[Message]]:
        inserted = await self.insert_messages(planned) if planned else InsertResult([], 0)
        await self.set_plan_marks([mark])
        return inserted, await self.pending_for_user(user_id)
