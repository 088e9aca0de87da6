"""SQLite's message counts (``message_counts``, kept by triggers since migration 16) stay
equal to a fresh count of the messages: after any sequence of inserts and transitions,
under concurrent writers on two connections, after a transaction rolled back, and on a
file migrated with messages already in it."""

from __future__ import annotations

import asyncio
import sqlite3
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tepat.adapters.sqlite import SqliteStore, schema
from tepat.domain.models import MessageStatus
from tepat.ports.repositories.messages import StatusChange
from tests.contract.records import T0, at, msg

STATUSES = list(MessageStatus)
CATEGORIES = ("meal", "mood", "safety")
CHANNELS = ("push", "sms")

Key = tuple[str, str, str]


def fresh_counts(db: Path) -> dict[Key, int]:
    conn = sqlite3.connect(db)
    try:
        rows = conn.execute(
            "SELECT status, category, channel, count(*) FROM messages GROUP BY 1, 2, 3"
        ).fetchall()
    finally:
        conn.close()
    return {(s, c, ch): n for s, c, ch, n in rows}


async def kept_counts(store: SqliteStore) -> dict[Key, int]:
    return dict((await store.count_messages()).by_status_category_channel)


# One step: insert message k (category, channel) or move message k to a status.
steps = st.lists(
    st.one_of(
        st.tuples(
            st.just("insert"),
            st.integers(0, 11),
            st.sampled_from(CATEGORIES),
            st.sampled_from(CHANNELS),
        ),
        st.tuples(st.just("move"), st.integers(0, 11), st.sampled_from(STATUSES)),
        st.tuples(st.just("claim"), st.integers(0, 11)),
    ),
    max_size=25,
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps)
def test_counts_equal_a_fresh_count_after_any_inserts_and_transitions(
    ops: list[tuple[object, ...]],
) -> None:
    async def go(db: Path) -> None:
        store = SqliteStore(str(db))
        await store.open()
        try:
            for op in ops:
                k = f"m{op[1]}"
                if op[0] == "insert":
                    await store.insert_messages(
                        [msg(k, category=str(op[2]), channel=str(op[3]), label=k)]
                    )
                elif op[0] == "move":
                    change = StatusChange(msg(k).id, MessageStatus(str(op[2])), reason="x")
                    await store.transition_many([change], T0, expect=STATUSES)
                else:
                    await store.claim([msg(k).id], at(5))
                assert await kept_counts(store) == fresh_counts(db)
        finally:
            await store.close()

    with tempfile.TemporaryDirectory() as d:
        asyncio.run(go(Path(d) / "t.db"))


async def test_counts_stay_exact_under_concurrent_writers_on_two_connections(
    tmp_path: Path,
) -> None:
    db = tmp_path / "t.db"
    stores = [SqliteStore(str(db)), SqliteStore(str(db))]
    for s in stores:
        await s.open()
    try:

        async def writer(store: SqliteStore, w: int) -> None:
            for n in range(40):
                ms = [
                    msg(
                        f"w{w}-{n}-{j}",
                        category=CATEGORIES[j % 3],
                        label=f"{w}.{j}",
                        scheduled_at=at(n),
                    )
                    for j in range(5)
                ]
                # Both writers insert the shared messages too: only one copy counts.
                ms.append(msg(f"shared-{n}", scheduled_at=at(n)))
                await store.insert_messages(ms)
                await store.claim([m.id for m in ms[::2]], at(n + 1))
                done = [StatusChange(m.id, MessageStatus.SENT) for m in ms[::4]]
                await store.transition_many(done, at(n + 2), expect=[MessageStatus.SENDING])

        await asyncio.gather(*(writer(s, w) for w, s in enumerate(stores)))
        assert await kept_counts(stores[0]) == fresh_counts(db)
        assert sum(fresh_counts(db).values()) == 2 * 40 * 5 + 40
    finally:
        for s in stores:
            await s.close()


async def test_a_rolled_back_transaction_leaves_the_counts_as_they_were(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    store = SqliteStore(str(db))
    await store.open()
    try:
        await store.insert_messages([msg("kept")])
        before = await kept_counts(store)
        conn = sqlite3.connect(db, isolation_level=None)
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("UPDATE messages SET status = 'sent'")
        conn.close()  # a crash before COMMIT: the change and its counts go together
        assert await kept_counts(store) == before == fresh_counts(db)
    finally:
        await store.close()


def test_a_file_with_messages_before_migration_16_gets_their_counts(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    db = tmp_path / "t.db"
    conn = sqlite3.connect(db, isolation_level=None)
    monkeypatch.setattr(schema, "MIGRATIONS", tuple(m for m in schema.MIGRATIONS if m[0] < 16))
    schema._migrate(conn, "t0")
    conn.close()

    async def reopen() -> None:
        store = SqliteStore(str(db))  # opening applies what is missing: 16 too
        await store.open()
        await store.close()

    conn = sqlite3.connect(db)
    conn.executescript(
        "INSERT INTO messages (id, user_id, category, label, title, body, scheduled_at,"
        " timezone, dedup_key, data, status, attempts, plan_version, created_at,"
        " updated_at, channel) VALUES ('a', 'u', 'meal', '', 't', 'b', 'x', 'UTC', 'a',"
        " '{}', 'sent', 1, 0, 'x', 'x', 'push'), ('b', 'u', 'meal', '', 't', 'b', 'y', 'UTC',"
        " 'b', '{}', 'sent', 1, 0, 'x', 'x', 'push');"
    )
    conn.close()
    monkeypatch.undo()
    asyncio.run(reopen())
    conn = sqlite3.connect(db)
    assert conn.execute("SELECT status, category, channel, n FROM message_counts").fetchall() == [
        ("sent", "meal", "push", 2)
    ]
