"""Under ``-n 2 --dist loadgroup``, the tests of a group of tests/support/xdist_groups.py
run on one worker."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from tests.support.xdist_groups import GroupScheduling, group_of

ROOT = Path(__file__).resolve().parents[2]
RECORD = """
import os

import pytest

@pytest.mark.parametrize("backend", ["embedded"])
def test_{n}(backend, tmp_path_factory):
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
    # the quick bench run's tests of one backend (a group), and tests of their own
    quick = "".join(RECORD.format(n=n, where="quick") for n in range(4))
    pytester.makepyfile(**{"tests/bench/test_bench_quick": quick})
    for n in range(4):
        pytester.makepyfile(**{f"tests/other/test_other_{n}": RECORD.format(n=n, where="other")})
    result = pytester.runpytest_subprocess(
        "-p", "xdist.plugin", "-p", "tests.support.xdist_groups", "-n", "2", "--dist", "loadgroup"
    )
    result.assert_outcomes(passed=8)
    [workers] = pytester.path.parent.glob("**/workers")
    seen = {f.name: f.read_text() for f in workers.iterdir()}
    assert len({w for name, w in seen.items() if name.startswith("quick")}) == 1, seen
    # xdist's first round gives each worker units in turn: ungrouped, the quick run's
    # tests would be spread over both
    assert len(seen) == 8, seen


def test_the_quick_run_on_activemq_is_a_group_of_its_own() -> None:
    quick = "tests/bench/test_bench_quick.py::"
    assert group_of(f"{quick}test_every_scenario_prints_its_json_line_and_exits_0[activemq]") == (
        "bench-activemq"
    )
    assert group_of(f"{quick}test_every_message_sent_once_nothing_lost[activemq-burst]") == (
        "bench-activemq"
    )
    assert group_of(f"{quick}test_every_message_sent_once_nothing_lost[embedded-burst]") == (
        "bench-embedded"
    )
    # its other tests, and the other benches, are units of their own
    assert group_of(f"{quick}test_chaos_store_restart_on_mongo_loses_nothing") is None
    assert group_of("tests/bench/test_bench_push_providers.py::test_once[fcm-activemq]") is None
    assert group_of("tests/api/test_users.py::test_activemq") is None


class FakeWorker:
    """What the scheduler uses of a worker, and the tests it was sent (by collection index);
    a dictionary key, as a worker is."""

    sent: list[int]

    def __init__(self, **what: Any) -> None:
        self.__dict__.update(what)


def fake_worker(name: str) -> FakeWorker:
    sent: list[int] = []
    return FakeWorker(
        gateway=SimpleNamespace(id=name),
        shutting_down=False,
        sent=sent,
        send_runtest_some=sent.extend,
        shutdown=lambda: None,
    )


def test_a_worker_never_queues_a_long_unit_behind_another() -> None:
    """Three model runs and short tests on two workers: xdist's own rule (a worker takes
    its next unit while two of its tests are still to run) queued the third model run
    behind the first on one worker while the other ran out of work."""
    long = [f"tests/model/test_model.py::test_tepat_keeps_its_promise[{s}]" for s in "abc"]
    collection = long + [f"tests/api/test_users.py::test_{n}" for n in range(12)]
    config = SimpleNamespace(
        option=SimpleNamespace(loadscopereorder=True), getvalue={"tx": ["2*popen"]}.get
    )
    scheduler = GroupScheduling(config)
    workers = [fake_worker("gw0"), fake_worker("gw1")]
    for worker in workers:
        scheduler.add_node(worker)
        scheduler.add_node_collection(worker, collection)
    scheduler.schedule()

    def long_ones_queued(worker: FakeWorker) -> list[str]:
        done = scheduler.assigned_work[worker]
        return [
            nodeid
            for unit in done.values()
            for nodeid, finished in unit.items()
            if not finished and nodeid in long
        ]

    # Each worker runs its tests in the order sent: the short ones finish, the long ones
    # (the first sent) stay running; then the first worker's long one finishes too.
    for worker in workers:
        assert len(long_ones_queued(worker)) == 1, scheduler.assigned_work[worker]
        for index in worker.sent[1:]:
            scheduler.mark_test_complete(worker, index)
            assert len(long_ones_queued(worker)) <= 1, scheduler.assigned_work[worker]
    first = workers[0]
    scheduler.mark_test_complete(first, first.sent[0])
    # the third long one now goes to the worker that is free of one, not before
    assert long[2] in [collection[i] for i in first.sent]
    assert long[2] not in [collection[i] for i in workers[1].sent]
