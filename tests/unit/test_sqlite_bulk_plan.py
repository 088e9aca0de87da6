"""SQLite's bulk import plans its new users in the records' own transaction only while
the plan fits one transaction; past that the caller plans after the write."""

from __future__ import annotations

from pathlib import Path

import pytest

from tepat.adapters.sqlite import SqliteStore, bulk
from tepat.domain.models import User
from tepat.ports.repositories.bulk_import import NewUsersPlan
from tests.contract.records import msg


@pytest.mark.parametrize(("limit", "in_transaction"), [(2, True), (1, False)])
async def test_a_plan_larger_than_a_transaction_is_left_to_the_caller(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, limit: int, in_transaction: bool
) -> None:
    monkeypatch.setattr(bulk, "INSERT_ROWS_PER_TRANSACTION", limit)
    store = SqliteStore(str(tmp_path / "t.db"))
    await store.open()
    try:
        plan = NewUsersPlan([msg("a", user_id="u"), msg("b", user_id="u", label="b")], [])
        written = await store.write_records([User("u", "UTC")], [], [], lambda: plan)
        assert written.created == [True]
        assert written.planned is in_transaction
        assert len(await store.pending_for_user("u")) == (2 if in_transaction else 0)
        assert bool(written.stamps) is not in_transaction  # the caller's plan needs them
    finally:
        await store.close()
