"""Registers the SQLite adapter with the store contract suite."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from tepat.adapters.sqlite import SqliteStore
from tepat.ports.store import Store
from tests.support.store_factories import STORE_FACTORIES


@asynccontextmanager
async def sqlite_store(tmp: Path) -> AsyncIterator[Store]:
    store = SqliteStore(str(tmp / "tepat.db"))
    await store.open()
    try:
        yield store
    finally:
        await store.close()


STORE_FACTORIES["sqlite"] = sqlite_store
