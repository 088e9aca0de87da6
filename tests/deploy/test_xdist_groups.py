"""Under ``-n 2 --dist loadgroup``, the tests of a group of tests/support/xdist_groups.py
run on one worker."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.xdist_groups import group_of

ROOT = Path(__file__).resolve().parents[2]
RECORD = """
import os

def test_{where}_{n}(tmp_path_factory):
    out = tmp_path_factory.getbasetemp().parent / "workers"
    out.mkdir(exist_ok=True)
    (out / "{where}-{n}").write_text(os.environ["PYTEST_XDIST_WORKER"])
"""


def test_a_group_runs_on_one_worker(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    # only xdist and the plugin under test: the suite's other plugins slow each process
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    for where in ("bench", "other"):
        for n in range(4):
            pytester.makepyfile(
                **{f"tests/{where}/test_{where}_{n}": RECORD.format(n=n, where=where)}
            )
    result = pytester.runpytest_subprocess(
        "-p", "xdist.plugin", "-p", "tests.support.xdist_groups", "-n", "2", "--dist", "loadgroup"
    )
    result.assert_outcomes(passed=8)
    [workers] = pytester.path.parent.glob("**/workers")
    seen = {f.name: f.read_text() for f in workers.iterdir()}
    assert len({w for name, w in seen.items() if name.startswith("bench")}) == 1, seen
    # xdist's first round gives each worker units in turn: ungrouped, the bench tests
    # would be spread over both
    assert len(seen) == 8, seen


def test_the_quick_run_on_activemq_is_a_group_of_its_own() -> None:
    quick = "tests/bench/test_bench_quick.py::"
    assert group_of(f"{quick}test_every_scenario_prints_its_json_line_and_exits_0[activemq]") == (
        "bench-activemq"
    )
    assert group_of(f"{quick}test_every_message_sent_once_nothing_lost[activemq-burst]") == (
        "bench-activemq"
    )
    assert group_of(f"{quick}test_every_message_sent_once_nothing_lost[embedded-burst]") == "bench"
    assert group_of(f"{quick}test_chaos_store_restart_on_mongo_loses_nothing") == "bench"
    assert group_of("tests/api/test_users.py::test_activemq") is None
