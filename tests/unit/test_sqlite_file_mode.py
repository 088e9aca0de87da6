"""The SQLite store file and its -wal/-shm are readable by their owner only (0600),
whatever the umask; an older 0644 file is narrowed when opened (issue 19, 8)."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from tepat.adapters.sqlite import SqliteStore


@pytest.fixture(autouse=True)
def open_umask() -> Iterator[None]:
    """The common default: files 0644, readable by every local user."""
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def modes(folder: Path) -> dict[str, int]:
    return {p.name: mode(p) for p in folder.iterdir() if p.name.startswith("tepat.db")}


async def test_a_new_store_file_and_its_wal_are_0600(tmp_path: Path) -> None:
    db = tmp_path / "tepat.db"
    store = SqliteStore(str(db))
    await store.open()
    try:
        found = modes(tmp_path)
        assert set(found) >= {"tepat.db", "tepat.db-wal", "tepat.db-shm"}
        assert found == dict.fromkeys(found, 0o600)
    finally:
        await store.close()


async def test_an_older_world_readable_file_is_narrowed(tmp_path: Path) -> None:
    db = tmp_path / "tepat.db"
    first = SqliteStore(str(db))
    await first.open()
    await first.close()
    db.chmod(0o644)
    again = SqliteStore(str(db))
    await again.open()
    try:
        assert mode(db) == 0o600
    finally:
        await again.close()
