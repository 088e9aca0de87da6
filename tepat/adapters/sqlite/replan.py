"""A user's re-plan in two write transactions (``ReplanRepository``): each a single
trip to the writer's thread instead of one per statement, which is most of what a new
reminder's ``PUT`` costs on SQLite (a trip is 0.15-0.4 ms of CPU, the SQL microseconds).

The statements are the single-record methods' own (``users.py``, ``reminders.py``,
``messages_read.py``, ``messages_write.py``)."""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial

from tepat.adapters.sqlite.codecs import _chunks, _message, _message_params, _reminder, _ts
from tepat.adapters.sqlite.connection import SqliteBase
from tepat.adapters.sqlite.messages_read import PENDING_FOR_USER
from tepat.adapters.sqlite.messages_write import (
    INSERT_ROWS_PER_TRANSACTION,
    NEXT_PLAN_VERSION,
    created_of,
    inserted_ids,
)
from tepat.adapters.sqlite.reminders import LIST_REMINDERS
from tepat.adapters.sqlite.schema import Conn
from tepat.adapters.sqlite.users import PLAN_TARGET, SET_PLAN_MARK, _plan_target, mark_params
from tepat.domain.models import Message
from tepat.ports.repositories.messages import InsertResult
from tepat.ports.repositories.replan import ReplanStart
from tepat.ports.repositories.users import PlanMark


class ReplanMixin(SqliteBase):
    async def start_replan(self, user_id: str) -> ReplanStart | None:
        def start(c: Conn) -> ReplanStart | None:
            version = c.execute(NEXT_PLAN_VERSION, (user_id,)).fetchone()
            if version is None:
                return None
            target = _plan_target(c.execute(PLAN_TARGET, (user_id,)).fetchone())
            reminders = [_reminder(r) for r in c.execute(LIST_REMINDERS, (user_id,))]
            pending = [_message(r) for r in c.execute(PENDING_FOR_USER, (user_id,))]
            return ReplanStart(int(version[0]), target, reminders, pending)

        return await self._write(start)

    async def finish_replan(
        self, user_id: str, planned: Sequence[Message], mark: PlanMark
    ) -> tuple[InsertResult, list[Message]]:
        now = self._clock.now()
        stamp = _ts(now)
        # A plan bigger than one transaction should hold the lock for goes in slices
        # first (inserting again is idempotent); the last goes with the mark.
        *first, last = list(_chunks(planned, INSERT_ROWS_PER_TRANSACTION)) or [[]]
        ids: set[str] = set()
        for batch in first:
            rows = [_message_params(m, stamp) for m in batch]
            ids |= await self._write(partial(inserted_ids, rows=rows))
        rows = [_message_params(m, stamp) for m in last]

        def finish(c: Conn) -> tuple[set[str], list[Message]]:
            made = inserted_ids(c, rows)
            c.execute(SET_PLAN_MARK, mark_params(mark))
            return made, [_message(r) for r in c.execute(PENDING_FOR_USER, (user_id,))]

        made, pending = await self._write(finish)
        created = created_of(planned, ids | made, now)
        return InsertResult(created, len(planned) - len(created)), pending
