"""Writing messages: bulk insert, claim, status transitions, cancelling pending ones."""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import sqlite3
from collections.abc import Sequence
from datetime import datetime
from operator import attrgetter, itemgetter
from typing import Any

from tepat.adapters.message_transition import TransitionOne, transition_fields
from tepat.adapters.sqlite.codecs import (
    _MESSAGE_COLUMNS,
    Row,
    _chunks,
    _message,
    _message_params,
    _placeholders,
    _ts,
)
from tepat.adapters.sqlite.connection import SqliteBase, _in_chunks, _insert_many
from tepat.adapters.sqlite.schema import Conn
from tepat.adapters.store_results import in_asked_order
from tepat.domain.models import CLAIMABLE, Message, MessageStatus, allowed_sources
from tepat.ports.repositories.messages import InsertResult, StatusChange

# Messages per write transaction: big enough to amortise the commit, small
# enough that another process's writer waits a fraction of a second at most.
INSERT_ROWS_PER_TRANSACTION = 5000


def _with_stamps(m: Message, now: datetime) -> Message:
    """The message as stored: timestamps the caller left out filled from the clock,
    and the instants and slot it left out derived as the domain does."""
    if None not in (m.created_at, m.updated_at, m.nominal_at, m.due_at, m.slot_key):
        return m
    return dataclasses.replace(
        m,
        created_at=m.created_at or now,
        updated_at=m.updated_at or now,
        nominal_at=m.nominal,
        due_at=m.due,
        slot_key=m.slot,
    )


# No conflict target: DO NOTHING then covers every unique index, the partial ones
# included, which is exactly "already exists".
INSERT_MESSAGES = (
    f"INSERT INTO messages ({_MESSAGE_COLUMNS}) VALUES {{values}} "
    "ON CONFLICT DO NOTHING RETURNING id"
)


NEXT_PLAN_VERSION = (
    "UPDATE users SET plan_version = plan_version + 1 WHERE user_id = ? RETURNING plan_version"
)


def inserted_ids(conn: Conn, rows: Sequence[Row]) -> set[str]:
    """Insert message ``rows``; the ids of those no unique index refused."""
    return {r[0] for r in _insert_many(conn, INSERT_MESSAGES, rows)} if rows else set()


def created_of(batch: Sequence[Message], inserted: set[str], now: datetime) -> list[Message]:
    """The messages of ``batch`` whose rows went in (``inserted``), in input order."""
    # RETURNING order is unspecified, so match by id; of a repeated id, the first
    # message is the one its row holds.
    first: dict[str, Message] = {}
    for m in batch:
        first.setdefault(m.id, m)
    return [_with_stamps(m, now) for message_id, m in first.items() if message_id in inserted]


class MessagesWriteMixin(TransitionOne, SqliteBase):
    async def insert_messages(self, messages: Sequence[Message]) -> InsertResult:
        now = self._clock.now()
        now_text = _ts(now)
        created: list[Message] = []
        # One transaction per slice, not per call: a 300k plan must not hold
        # the write lock for seconds while another process waits. A crash
        # between slices is harmless, since inserting again is idempotent.
        # Slice k+1 is encoded here while the worker writes slice k: sqlite3
        # releases the GIL while it works, so the two overlap on two cores.
        writing: asyncio.Future[list[Message]] | None = None
        try:
            for batch in _chunks(messages, INSERT_ROWS_PER_TRANSACTION):
                rows = [_message_params(m, now_text) for m in batch]
                if writing is not None:
                    created.extend(await writing)
                writing = asyncio.ensure_future(self._insert_batch(batch, rows, now))
            if writing is not None:
                created.extend(await writing)
        finally:
            if writing is not None and not writing.done():
                # Encoding failed mid-way: let the slice in flight finish
                # (its rows are committed either way) before reporting.
                await asyncio.wait([writing])
        return InsertResult(created=created, existing=len(messages) - len(created))

    async def _insert_batch(
        self, batch: Sequence[Message], rows: Sequence[Row], now: datetime
    ) -> list[Message]:
        inserted = await self._write(lambda c: inserted_ids(c, rows))
        return created_of(batch, inserted, now)

    async def claim(
        self, message_ids: Sequence[str], now: datetime, due_before: datetime | None = None
    ) -> list[Message]:
        stamp = _ts(now)
        # "~" sorts after every timestamp: no bound.
        bound = "~" if due_before is None else _ts(due_before)
        sources = [s.value for s in CLAIMABLE]
        sql = (
            "UPDATE messages SET status = ?, claimed_at = ?, "
            "attempts = attempts + 1, updated_at = ?, publish_pending = 0 "
            f"WHERE id IN ({{ids}}) AND status IN ({_placeholders(len(sources))}) "
            f"AND due_at < ? RETURNING {_MESSAGE_COLUMNS}"
        )
        before = (MessageStatus.SENDING.value, stamp, stamp)
        rows = await self._write(
            lambda c: _in_chunks(c, sql, message_ids, (*sources, bound), before)
        )
        return in_asked_order(message_ids, map(_message, rows), attrgetter("id"))

    async def renew_claims(self, message_ids: Sequence[str], now: datetime) -> int:
        return await self._update_where_status(
            message_ids, MessageStatus.SENDING, "claimed_at = ?", (_ts(now),)
        )

    async def _update_where_status(
        self,
        message_ids: Sequence[str],
        status: MessageStatus,
        assignments: str,
        values: tuple[Any, ...],
    ) -> int:
        """``SET assignments`` (``values`` for its placeholders) on those of
        ``message_ids`` in ``status``, in one write; how many rows changed."""
        if not message_ids:
            return 0
        sql = f"UPDATE messages SET {assignments} WHERE id IN ({{ids}}) AND status = ? RETURNING 1"
        changed = await self._write(
            lambda c: _in_chunks(c, sql, message_ids, (status.value,), values)
        )
        return len(changed)

    async def transition_many(
        self, changes: Sequence[StatusChange], now: datetime, *, expect: Sequence[MessageStatus]
    ) -> int:
        # The table asked once per target status, not once per change; a change it allows
        # from none of ``expect`` is refused, nothing written.
        targets = {change.to for change in changes}
        sources = {to: tuple(s.value for s in allowed_sources(to, expect)) for to in targets}
        statements = [
            _transition_statement(change, now, sources[change.to])
            for change in changes
            if sources[change.to]
        ]
        if not statements:
            return 0
        return await self._write(lambda c: _apply_transitions(c, statements))

    async def mark_published(self, published: Sequence[tuple[str, datetime]]) -> int:
        if not published:
            return 0
        params = [(mid, _ts(due)) for mid, due in published]
        # Guarded on due_at: a message put back to pending since it was read carries
        # a new due_at and keeps its mark for the next pass.
        sql = (
            "UPDATE messages SET publish_pending = 0 "
            "WHERE id = ? AND due_at = ? AND publish_pending = 1"
        )
        return await self._write(lambda c: c.executemany(sql, params).rowcount)

    async def republish(self, message_ids: Sequence[str], due_at: datetime) -> int:
        return await self._update_where_status(
            message_ids, MessageStatus.PENDING, "publish_pending = 1, due_at = ?", (_ts(due_at),)
        )

    async def republish_all_pending(self) -> int:
        return await self._execute(
            "UPDATE messages SET publish_pending = 1 "
            "WHERE status = 'pending' AND publish_pending = 0"
        )


# One change's conditional update: the columns it sets (``release_live_key`` clears
# ``live_key`` besides), how many statuses it may come from, and whether it goes back to
# pending; and its values: each column's, the message id, each status expected.
_Shape = tuple[tuple[str, ...], bool, int, bool]
_Transition = tuple[_Shape, tuple[Any, ...]]


def _transition_statement(change: StatusChange, now: datetime, sources: Row) -> _Transition:
    """One change as its shape and values, ``sources`` the statuses the transition table
    lets it come from (of those the caller expects)."""
    fields = transition_fields(change, now)
    values = [_ts(v) if isinstance(v, datetime) else v for v in fields.values()]
    to_pending = change.to is MessageStatus.PENDING
    shape = (tuple(fields), change.release_live_key, len(sources), to_pending)
    return shape, (*values, change.message_id, *sources)


def _apply_transitions(conn: Conn, statements: Sequence[_Transition]) -> int:
    """Run ``statements`` in order; how many rows they changed. A run of one shape (a
    batch's ``sent``, each with its ticket) on distinct messages is one UPDATE joined to
    their values: a statement per message cost as much as the rest of the record, and
    twice as much as the one. Back to pending stays one at a time: each may find its slot
    taken, and one refusal must not undo the others."""
    changed = 0
    for shape, run in itertools.groupby(statements, key=itemgetter(0)):
        rows = [values for _, values in run]
        columns, release_live_key, expected, to_pending = shape
        sets = [f"{column} = ?" for column in columns]
        if release_live_key:
            sets.append("live_key = NULL")
        one = (
            f"UPDATE messages SET {', '.join(sets)} "
            f"WHERE id = ? AND status IN ({_placeholders(expected)})"
        )
        if to_pending:
            changed += sum(_apply_transition(conn, one, row) for row in rows)
        elif len({row[len(columns)] for row in rows}) < len(rows):
            # A message twice: each change must see the one before it, as one at a time.
            changed += conn.executemany(one, rows).rowcount
        else:
            # Padded with rows of no message (a NULL id matches none).
            filler = (None,) * len(rows[0])
            joined = _joined(columns, release_live_key, expected)
            changed += len(_insert_many(conn, joined, rows, filler))
    return changed


def _joined(columns: tuple[str, ...], release_live_key: bool, expected: int) -> str:
    """The UPDATE of changes of one shape on distinct messages, its ``{values}`` their rows."""
    names = [*columns, "id", *(f"from_{k}" for k in range(expected))]
    sets = [f"{column} = v.{column}" for column in columns]
    if release_live_key:
        sets.append("live_key = NULL")
    sources = ", ".join(f"v.from_{k}" for k in range(expected))
    # The values drive the join, each finding its message by the primary key.
    return (
        f"WITH v({', '.join(names)}) AS (VALUES {{values}}) "
        f"UPDATE messages SET {', '.join(sets)} FROM v "
        f"WHERE messages.id = v.id AND messages.status IN ({sources}) RETURNING 1"
    )


def _apply_transition(conn: Conn, sql: str, params: tuple[Any, ...]) -> int:
    try:
        return int(conn.execute(sql, params).rowcount)
    except sqlite3.IntegrityError:
        # Back to pending onto a slot another pending message already holds (slots
        # name the intent and its nominal instant, so only a duplicate intent can):
        # the update did not happen, and the caller closes the message honestly.
        return 0
