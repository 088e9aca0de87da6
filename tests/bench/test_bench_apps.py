"""``bench apps --quick``: two apps in one deployment, app a flooding at 5x its ceiling.

Every message of both apps sent once, none lost, the consumer drained cleanly; a's
critical messages went on its reserve (``tepat_critical_reserve_used_total{app="a"}``)
and b's never met a 429. B's lateness against its rule is a figure of the bench
(bench/README.md), not asserted here: timings are measured in benchmarks, not in tests.
"""

from __future__ import annotations

import os

import pytest

from tests.bench.running import STOMP_URL_ENV, backends, bench_result


@pytest.mark.parametrize("backend", backends())
def test_one_apps_flood_leaves_the_others_critical_messages_on_time(backend: str) -> None:
    argv = ["bench", "apps", "--quick", "--json", "--backend", backend]
    if backend == "activemq":
        argv += ["--stomp-url", os.environ[STOMP_URL_ENV]]
    result = bench_result(*argv, timeout=300)
    c = result["correctness"]
    for run in ("run_1", "run_2"):  # the baseline, the flood
        one = c[run]
        assert one["expected"] > 0
        assert (one["sent"], one["duplicates"], one["lost"]) == (one["expected"], 0, 0), one
        assert one["tokens_received_twice"] == 0, one
    assert c["ok"] and all(result["checks"].values()), result["checks"]
    f, p = result["figures"], result["parameters"]
    bulk = p["a_bulk"]
    assert f["flood_a_bulk"]["messages"] == bulk > 0
    assert f["flood_b_critical"]["messages"] == f["baseline_b_critical"]["messages"] > 0
    assert f["flood_a_critical"]["messages"] > 0
    assert f["a_critical_reserve_used"] > 0, f
    assert f["responses_429"]["flood"]["b"] == 0, f
