"""Business events on SQLite (migration 7): the event row, its listed recipients, its cursor."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from operator import itemgetter

from tepat.adapters.event_fields import EVENT_FIELDS, STORED_EVENT_FIELDS, new_event
from tepat.adapters.sqlite.codecs import Row, _decoder, _dt, _dt_opt, _encoder, _ts, _ts_opt
from tepat.adapters.sqlite.connection import SqliteBase, _insert_new
from tepat.adapters.sqlite.schema import Conn
from tepat.domain.events import Event, EventState, event_key_range

_COLUMNS = (
    "event_id, type, category, priority, request_hash, all_users, data, occurred_at, "
    "send_at, local_time, listed, state, cursor, recipients, counts, created_at, updated_at"
)
_SELECT = f"SELECT {_COLUMNS} FROM events"


def _json(value: object) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), sort_keys=True)


_event_row = _encoder(
    _COLUMNS,
    **STORED_EVENT_FIELDS,
    all_users=int,
    data=lambda data: _json(dict(data)),
    occurred_at=_ts,
    send_at=_ts_opt,
    counts=_json,
    created_at=_ts,
    updated_at=_ts,
)
_event = _decoder(
    Event,
    _COLUMNS,
    **EVENT_FIELDS,
    occurred_at=_dt,
    send_at=_dt_opt,
    counts=json.loads,
    created_at=_dt,
    updated_at=_dt,
)


class EventsMixin(SqliteBase):
    async def create_event(self, event: Event, user_ids: Sequence[str]) -> tuple[Event, bool]:
        values = _event_row(new_event(event, EventState.FANNING_OUT, self._clock.now()))
        ids = sorted(set(user_ids))

        # One transaction: the event is never seen without all its recipients.
        def run(conn: Conn) -> tuple[Row, bool]:
            inserted = _insert_new(conn, "events", _COLUMNS, values)
            if inserted:
                recipients = ((event.event_id, u) for u in ids)  # streamed, not built whole
                conn.executemany("INSERT OR IGNORE INTO event_recipients VALUES (?, ?)", recipients)
            row = conn.execute(f"{_SELECT} WHERE event_id = ?", (event.event_id,)).fetchone()
            return row, inserted

        row, created = await self._write(run)
        return _event(row), created

    async def get_event(self, event_id: str) -> Event | None:
        return await self._fetch_one(_event, f"{_SELECT} WHERE event_id = ?", (event_id,))

    async def events_fanning_out(self, limit: int) -> list[Event]:
        # "!= 'done'" spelled out so the partial index ix_events_open serves it.
        sql = f"{_SELECT} WHERE state != 'done' AND state = ? ORDER BY created_at, event_id LIMIT ?"
        return await self._fetch(_event, sql, (EventState.FANNING_OUT.value, max(0, limit)))

    async def event_recipients(
        self, event_id: str, all_users: bool, after: str, limit: int
    ) -> list[str]:
        table, listed = ("users", "") if all_users else ("event_recipients", "event_id = ? AND ")
        sql = f"SELECT user_id FROM {table} WHERE {listed}user_id > ? ORDER BY user_id LIMIT ?"
        params = (after, max(0, limit)) if all_users else (event_id, after, max(0, limit))
        return await self._fetch(itemgetter(0), sql, params)

    async def advance_event(
        self,
        event_id: str,
        after: str,
        to: str,
        recipients: int,
        counts: Mapping[str, int],
        done: bool,
        now: datetime,
    ) -> bool:
        def run(conn: Conn) -> bool:
            row = conn.execute(
                "SELECT counts FROM events WHERE event_id = ? AND cursor = ? AND state = ?",
                (event_id, after, EventState.FANNING_OUT.value),
            ).fetchone()
            if row is None:
                return False
            merged = dict(json.loads(row[0]))
            for key, n in counts.items():
                merged[key] = merged.get(key, 0) + n
            state = EventState.DONE if done else EventState.FANNING_OUT
            conn.execute(
                "UPDATE events SET cursor = ?, recipients = recipients + ?, counts = ?, "
                "state = ?, updated_at = ? WHERE event_id = ?",
                (to, recipients, _json(merged), state.value, _ts(now), event_id),
            )
            return True

        return await self._write(run)

    async def event_message_counts(self, event_id: str) -> dict[tuple[str, str, str], int]:
        low, high = event_key_range(event_id)
        rows = await self._select(
            "SELECT channel, status, coalesce(status_reason, ''), count(*) FROM messages "
            "WHERE dedup_key >= ? AND dedup_key < ? GROUP BY 1, 2, 3",
            (low, high),
        )
        return {(r[0], r[1], r[2]): int(r[3]) for r in rows}
