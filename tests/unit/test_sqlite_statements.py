"""SQLite's statements over many messages: the batch status update (one UPDATE joined to
the changes' values), and how few texts each takes."""

from __future__ import annotations

import sqlite3

from tepat.adapters.sqlite.connection import ID_CHUNK, _in_chunks, _statement_size
from tepat.adapters.sqlite.messages_write import _joined
from tepat.adapters.sqlite.schema import _migrate
from tepat.domain.batches import MAX_BATCH


def test_a_batch_update_finds_each_message_by_its_primary_key() -> None:
    """The values drive the join, each looking its message up, even where the statistics
    call the messages table tiny (a fresh file): never a scan of every message."""
    conn = sqlite3.connect(":memory:", isolation_level=None)
    _migrate(conn, "t0")
    conn.execute(
        "INSERT INTO messages (id, user_id, category, label, title, body, scheduled_at, "
        "timezone, dedup_key, data, status, attempts, plan_version, created_at, updated_at) "
        "VALUES ('m1', 'u1', 'meal', '', 't', 'b', 't0', 'UTC', 'd1', '{}', 'sending', 1, 1, "
        "'t0', 't0')"
    )
    conn.execute("ANALYZE")
    columns = ("status", "updated_at", "ticket_id", "publish_pending")
    sql = _joined(columns, False, 1).format(values=",".join(["(?, ?, ?, ?, ?, ?)"] * 100))
    plan = [row[3] for row in conn.execute(f"EXPLAIN QUERY PLAN {sql}", [None] * 600)]
    assert "SCAN v" in plan
    assert any(step.startswith("SEARCH messages USING INDEX") for step in plan), plan
    assert not any(step.startswith("SCAN messages") for step in plan), plan


def test_a_query_over_ids_has_a_few_texts_whatever_the_batch_size() -> None:
    """Padded (the ids with their last one, a batch update with rows of no message), so
    the statements stay in sqlite3's cache; each id's row comes back once."""
    sizes = {_statement_size(n, ID_CHUNK) for n in range(1, ID_CHUNK + 1)}
    assert len(sizes) <= 11
    assert _statement_size(MAX_BATCH, ID_CHUNK) == MAX_BATCH  # a full batch: no padding
    assert all(n <= _statement_size(n, ID_CHUNK) <= ID_CHUNK for n in range(1, ID_CHUNK + 1))
    conn = sqlite3.connect(":memory:", isolation_level=None)
    conn.execute("CREATE TABLE t (id TEXT PRIMARY KEY)")
    conn.executemany("INSERT INTO t VALUES (?)", [(f"i{k}",) for k in range(10)])
    texts: list[str] = []
    conn.set_trace_callback(texts.append)
    asked = ["i1", "i2", "i3", "x", "i4"] * 2
    rows = _in_chunks(conn, "SELECT id FROM t WHERE id IN ({ids})", asked)
    assert sorted(rows) == [("i1",), ("i2",), ("i3",), ("i4",)]
    # The trace shows the values bound: five ids, the last three times more.
    assert texts == ["SELECT id FROM t WHERE id IN ('i1','i2','i3','x','i4','i4','i4','i4')"]
