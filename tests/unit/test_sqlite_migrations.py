"""SQLite migrations: each number applied once, and a missing lower one applied late
(migrations written side by side can land out of order)."""

from __future__ import annotations

import sqlite3

import pytest

from tepat.adapters.sqlite import schema


def versions(conn: sqlite3.Connection) -> list[int]:
    return [r[0] for r in conn.execute("SELECT version FROM schema_migrations ORDER BY version")]


def tables(conn: sqlite3.Connection) -> set[str]:
    return {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}


def test_a_migration_that_lands_after_a_higher_one_is_still_applied(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    conn = sqlite3.connect(":memory:", isolation_level=None)
    one = (1, ("CREATE TABLE a (x)",))
    three = (3, ("CREATE TABLE c (x)",))
    two = (2, ("CREATE TABLE b (x)",))
    monkeypatch.setattr(schema, "MIGRATIONS", (one, three))
    schema._migrate(conn, "t0")
    assert versions(conn) == [1, 3]

    monkeypatch.setattr(schema, "MIGRATIONS", (one, two, three))
    schema._migrate(conn, "t1")
    assert versions(conn) == [1, 2, 3]
    assert {"a", "b", "c"} <= tables(conn)
    schema._migrate(conn, "t2")  # nothing left: each applied once
    assert versions(conn) == [1, 2, 3]


def test_the_real_migrations_apply_on_an_empty_file() -> None:
    conn = sqlite3.connect(":memory:", isolation_level=None)
    schema._migrate(conn, "t0")
    assert versions(conn) == [v for v, _ in schema.MIGRATIONS]
    assert "templates" in tables(conn)


def test_a_device_stored_before_kinds_is_an_expo_device(monkeypatch: pytest.MonkeyPatch) -> None:
    conn = sqlite3.connect(":memory:", isolation_level=None)
    before = tuple(m for m in schema.MIGRATIONS if m[0] < 14)
    monkeypatch.setattr(schema, "MIGRATIONS", before)
    schema._migrate(conn, "t0")
    conn.execute(
        "INSERT INTO devices (user_id, device_id, push_token, active, consecutive_failures, "
        "created_at, updated_at) VALUES ('u1', 'd1', 'ExponentPushToken[a]', 1, 0, 't0', 't0')"
    )
    monkeypatch.undo()
    schema._migrate(conn, "t1")
    assert conn.execute("SELECT kind FROM devices").fetchall() == [("expo",)]


def test_no_trigger_tests_an_in_list() -> None:
    """SQLite builds an IN list of constants as a temporary b-tree once per row inside a
    trigger: a trigger on messages that held one made every claim a fifth dearer."""
    conn = sqlite3.connect(":memory:", isolation_level=None)
    schema._migrate(conn, "t0")
    triggers = conn.execute("SELECT name, sql FROM sqlite_master WHERE type = 'trigger'")
    assert [name for name, sql in triggers if " IN (" in sql.upper()] == []
