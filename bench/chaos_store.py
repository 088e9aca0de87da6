"""The store a chaos run reads, behind one small interface: a SQLite file or a MongoDB
server. The rig and the tally read messages and tickets through it; the processes under
test get its ``url``, and seeding goes through Tepat's own store adapter on the same URL.

Both read what the processes wrote without taking part: SQLite on a read-only connection
(never the write lock), MongoDB with its own client, whose reads wait out a restart.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from pymongo import MongoClient

from bench.mongo_wire import MongoWire, mongo_wire

STORES = ("sqlite", "mongo")
# a read during a restart waits for the server rather than failing the run
MONGO_READ_WAIT_MS = 60_000


@dataclass(frozen=True)
class MessageRow:
    status: str
    reason: str | None
    ticket_id: str | None
    attempts: int
    last_error: str | None
    publish_pending: bool


class ChaosStore(Protocol):
    @property
    def url(self) -> str:
        """``TEPAT_DATABASE_URL`` of the processes (and of the seeding)."""
        ...

    def messages(self) -> dict[str, MessageRow]: ...

    def recorded_tickets(self) -> set[str]:
        """Ids of the tickets the store recorded (the tickets table or collection)."""
        ...


@dataclass(frozen=True)
class SqliteFile:
    path: Path

    @property
    def url(self) -> str:
        return f"sqlite:///{self.path}"

    def _rows(self, sql: str) -> list[Any]:
        conn = sqlite3.connect(f"file:{self.path}?mode=ro", uri=True, timeout=30)
        try:
            return conn.execute(sql).fetchall()
        finally:
            conn.close()

    def messages(self) -> dict[str, MessageRow]:
        rows = self._rows(
            "SELECT id, status, status_reason, ticket_id, attempts, last_error, "
            "publish_pending FROM messages"
        )
        return {
            str(r[0]): MessageRow(str(r[1]), r[2], r[3], int(r[4]), r[5], bool(r[6])) for r in rows
        }

    def recorded_tickets(self) -> set[str]:
        return {str(t) for (t,) in self._rows("SELECT ticket_id FROM tickets")}


class MongoServer:
    def __init__(self, wire: MongoWire) -> None:
        self.wire = wire
        self._client: MongoClient[dict[str, Any]] = MongoClient(
            wire.url, serverSelectionTimeoutMS=MONGO_READ_WAIT_MS
        )

    @property
    def url(self) -> str:
        return self.wire.url

    def messages(self) -> dict[str, MessageRow]:
        fields = ("status", "status_reason", "ticket_id", "attempts", "last_error")
        docs = self._client.get_default_database()["messages"].find(
            {}, {f: 1 for f in (*fields, "publish_pending")}
        )
        return {
            str(d["_id"]): MessageRow(
                str(d["status"]),
                d.get("status_reason"),
                d.get("ticket_id"),
                int(d.get("attempts", 0)),
                d.get("last_error"),
                bool(d.get("publish_pending")),
            )
            for d in docs
        }

    def recorded_tickets(self) -> set[str]:
        tickets = self._client.get_default_database()["tickets"]
        return {str(d["_id"]) for d in tickets.find({}, {"_id": 1})}

    def close(self) -> None:
        self._client.close()


@contextmanager
def chaos_store(kind: str, workdir: Path) -> Iterator[ChaosStore]:
    """A fresh store of ``kind`` in ``workdir`` (mongo: a wire server of its own)."""
    if kind == "sqlite":
        yield SqliteFile(workdir / "tepat.db")
        return
    with mongo_wire(workdir / "mongo") as wire:
        server = MongoServer(wire)
        try:
            yield server
        finally:
            server.close()
