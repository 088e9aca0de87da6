"""SQLite's batch status update: one UPDATE joined to the changes' values."""

from __future__ import annotations

import sqlite3

from tepat.adapters.sqlite.messages_write import _joined
from tepat.adapters.sqlite.schema import _migrate


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
