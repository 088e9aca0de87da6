"""``python -m bench import`` at a tiny size: every user, device and reminder stored and
planned once, the scheduler's first plan after it creates nothing, a repeated batch
changes nothing; on SQLite, and on the MongoDB-wire server when
``TEPAT_TEST_MONGO_URL`` names one. Speed is reported, never asserted."""

from __future__ import annotations

import os

import pytest

from tests.bench.running import bench_result

STORES = ["sqlite", *(["mongo"] * bool(os.environ.get("TEPAT_TEST_MONGO_URL")))]


@pytest.mark.parametrize("store", STORES)
def test_bench_import_holds_its_checks(store: str) -> None:
    mongo = ["--mongo-url", os.environ["TEPAT_TEST_MONGO_URL"]] if store == "mongo" else []
    result = bench_result(
        "bench", "import", "--users", "300", "--clients", "4", "--store", store, *mongo, "--json"
    )
    assert result["scenario"] == "import" and result["ok"], result
    figures = result["figures"]
    # one daily reminder over 48 hours: two messages a user (a DST change may move one)
    assert abs(figures["messages_planned_by_import"] - 600) <= 30
    assert figures["first_plan_users_read"] == 0
    assert figures["stored"]["users"] == 300
    assert set(result["goals"]) == {"total_seconds<=16", "messages_per_second_over_import>=20000"}
