"""The capacity model (bench/capacity.py): it reproduces points it is given, flags one it
cannot, and its sizing grows with the load and never with the machine. No processes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from bench import capacity
from bench.capacity import Costs, Point, median_costs, points_from_dispatch, reproduce, throughput

COSTS = Costs(consumer=0.25, broker=0.04, provider=0.06, harness=0.02)


def points(cores_had: dict[int, float], bend: float = 1.0) -> list[Point]:
    """What the model itself says for these runs, the last one's rate times ``bend``."""
    out = [Point(n, cores, throughput(n, cores, COSTS), COSTS) for n, cores in cores_had.items()]
    last = out[-1]
    out[-1] = Point(last.consumers, last.cores, last.measured * bend, last.costs)
    return out


def test_reproduces_a_one_process_bound_point_and_core_bound_ones() -> None:
    given = points({1: 1.9, 2: 0.9, 3: 0.7})
    checks = reproduce(given, median_costs(given))
    # 1 process: its event loop (4,000/s) binds before 1.9 cores (5,135/s); then the cores
    assert [round(c.predicted) for c in checks] == [4000, 2432, 1892]
    assert all(abs(c.error) < 1e-9 for c in checks)


def test_a_point_the_model_misses_by_more_than_the_tolerance_fails_the_report() -> None:
    assert capacity.report(points({1: 2.0, 2: 2.0, 3: 2.0}, bend=1.10), 0.15)["ok"]
    missed = capacity.report(points({1: 2.0, 2: 2.0, 3: 2.0}, bend=0.70), 0.15)
    assert not missed["ok"]
    assert [r["within"] for r in missed["reproduced"]] == [True, True, False]


def test_throughput_grows_with_processes_and_cores_up_to_a_ceiling() -> None:
    rates = [[throughput(n, c, COSTS) for n in range(1, 40)] for c in (2, 8, 16)]
    for row in rates:
        assert row == sorted(row)  # more processes never slow it down
        assert row[-1] == max(row) <= row[0] * 40
    assert [r[-1] for r in rates] == sorted(r[-1] for r in rates)  # nor more cores
    assert throughput(40, 16, COSTS, provider_ceiling=600.0) == 600.0


def test_an_idle_process_costs_cores_so_more_of_them_on_busy_cores_send_less() -> None:
    idling = Costs(consumer=0.25, broker=0.04, provider=0.06, idle_cores=0.05)
    # 1,000 * 0.95 / 0.25 = 3,800/s per process; 2 cores hold 2 processes' work
    assert throughput(1, 2, idling) == pytest.approx(3800)
    two, three = throughput(2, 2, idling), throughput(3, 2, idling)
    assert two == pytest.approx(1900 / 0.35)
    assert three == pytest.approx(1850 / 0.35)
    assert three < two
    assert capacity.size(50_000, 8, idling).consumer_processes == 14  # 50,000 / 3,800


@pytest.mark.parametrize("cores", capacity.MACHINES)
def test_sizing_grows_with_the_load_and_states_the_provider_ceiling(cores: int) -> None:
    average, peak = (capacity.size(load, cores, COSTS) for load in capacity.TARGETS.values())
    # 1,000 / 0.25 ms = 4,000/s per busy consumer process
    assert (average.consumer_processes, peak.consumer_processes) == (2, 13)
    assert peak.consumer_machines >= average.consumer_machines >= 1
    assert peak.consumer_machines * cores >= peak.consumer_processes
    assert (average.expo_projects, peak.expo_projects) == (10, 84)
    assert peak.broker_cores == 2.0
    assert peak.store_cores is None  # not measured: said, not guessed


def dispatch_line(runs: dict[str, Any]) -> dict[str, Any]:
    return {"scenario": "dispatch", "figures": runs}


def run(rate: float, consumers: int, consumer_ms: float, other_work: float) -> dict[str, Any]:
    return {
        "messages_per_second": rate,
        "cpu_ms_per_notification": {
            "consumers": consumer_ms + 0.1,  # with idling: the model takes the work alone
            "consumers_work": consumer_ms,
            "broker": None,
            "sandbox": 0.05,
            "harness": 0.01,
        },
        "consumer_idle_cores": [0.0] * consumers,
        "machine": {"cores": 2, "other_work_cores": other_work},
    }


def test_points_come_from_a_dispatch_line_and_main_exits_1_when_one_is_off(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    line = dispatch_line(
        {
            "consumers_1": run(3000, 1, 0.3, 0.5),
            "consumers_2": "not applicable",
            "consumers_3": run(4500, 3, 0.3, 0.5),
        }
    )
    got = points_from_dispatch(line)
    assert [(p.consumers, p.cores, p.costs.broker) for p in got] == [(1, 1.5, 0.0), (3, 1.5, 0.0)]
    path = tmp_path / "dispatch.json"
    path.write_text("progress\n" + json.dumps(line) + "\n")
    # 1 process: 1,000/0.3 = 3,333/s (+11 %); 3: 1.5 cores / 0.36 ms = 4,167/s (-7 %)
    assert capacity.main(["--from", str(path), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [round(r["error"], 2) for r in out["reproduced"]] == [0.11, -0.07]
    assert capacity.main(["--from", str(path), "--tolerance", "0.05"]) == 1
    assert "OFF" in capsys.readouterr().out


def test_the_default_input_is_the_documented_measurement_and_it_reproduces() -> None:
    assert [p.consumers for p in capacity.MEASURED] == [1, 2, 3]
    assert capacity.main([]) == 0
