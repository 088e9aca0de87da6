"""``python -m bench.events --quick``: the harness works and its correctness checks hold.

Speed and memory are reported by the benchmark, never asserted here (docs/PRINCIPLES.md
§7); only that it prints its JSON line and that every correctness check held.
"""

from __future__ import annotations

from tests.bench.running import bench_result


def test_quick_events_bench_holds_its_checks() -> None:
    result = bench_result("bench.events", "--quick", "--json")
    assert result["scenario"] == "events" and result["ok"], result
    assert result["checks"] and all(result["checks"].values()), result["checks"]
    assert result["parameters"]["users"] == 2000
    for figure in ("campaign_api_seconds", "recipients_per_second", "goal_api_seconds"):
        assert figure in result["figures"]
