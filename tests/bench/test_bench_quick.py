"""A quick run of every benchmark scenario: the harness works and correctness holds.

Speed is not asserted (docs/PRINCIPLES.md §7: timing figures live in benchmarks, not in
assertions on wall-clock time): only that each run prints its JSON line last, that
every message was sent exactly once with nothing lost, and that the scenario's own
correctness checks held. Embedded always; ActiveMQ where ``TEPAT_TEST_STOMP_URL`` names
a broker. One ``python -m bench all --quick --json`` per backend keeps the total short.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from tests.bench.running import STOMP_URL_ENV, backends
from tests.support.mongo_factory import wire_server_venv

ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = ("plan", "dispatch", "ratelimited", "lateness", "burst", "register")


@cache
def quick_run(backend: str) -> tuple[int, list[dict[str, Any]], str]:
    """Run every scenario once per backend (cached across the tests of this module)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TEPAT_")}
    if backend == "activemq":
        env[STOMP_URL_ENV] = os.environ[STOMP_URL_ENV]
    proc = subprocess.run(
        [sys.executable, "-m", "bench", "all", "--quick", "--json", "--backend", backend],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        # burst's API half waits for a whole minute to come (its reminders' HH:MM)
        timeout=900,
    )
    lines = proc.stdout.strip().splitlines()[-len(SCENARIOS) :]
    results = [json.loads(line) for line in lines if line.startswith("{")]
    return proc.returncode, results, proc.stderr[-4000:]


@pytest.fixture(params=backends())
def run(request: pytest.FixtureRequest) -> tuple[int, list[dict[str, Any]], str]:
    return quick_run(request.param)


def test_every_scenario_prints_its_json_line_and_exits_0(
    run: tuple[int, list[dict[str, Any]], str],
) -> None:
    code, results, stderr = run
    assert [r["scenario"] for r in results] == list(SCENARIOS), stderr
    assert code == 0, stderr
    for r in results:
        for key in ("backend", "parameters", "figures", "goals", "cpu_count", "git_revision"):
            assert key in r, (r["scenario"], key)
        assert all(isinstance(v, bool) for v in r["goals"].values())


@pytest.mark.parametrize("scenario", [s for s in SCENARIOS if s not in ("plan", "register")])
def test_every_message_sent_once_nothing_lost(
    run: tuple[int, list[dict[str, Any]], str], scenario: str
) -> None:
    _, results, stderr = run
    result = next((r for r in results if r["scenario"] == scenario), None)
    assert result is not None, stderr
    c = result["correctness"]
    assert c["expected"] > 0
    assert c["sent"] == c["expected"], c
    assert c["duplicates"] == 0, c
    assert c["lost"] == 0, c
    assert c["tokens_received_twice"] == 0, c
    assert all(result["checks"].values()), result["checks"]


def test_burst_through_the_api_sends_every_reminder_once(
    run: tuple[int, list[dict[str, Any]], str],
) -> None:
    """The API half of ``burst``: every reminder PUT planned one message due at T, and each
    was sent exactly once (the bulk half is the generic check above)."""
    _, results, stderr = run
    burst = next((r for r in results if r["scenario"] == "burst"), None)
    assert burst is not None, stderr
    api = burst["correctness"]["api"]
    assert api["messages_due_at_T"] == api["expected"] > 0, api
    assert (api["sent"], api["duplicates"], api["lost"]) == (api["expected"], 0, 0), api
    assert api["tokens_received_twice"] == 0, api
    assert burst["figures"]["api"]["expo_requests"] > 0


def test_ratelimited_runs_against_a_limit_in_force(
    run: tuple[int, list[dict[str, Any]], str],
) -> None:
    """The sandbox really held Tepat (configured at 600/s) to 100/s: its token bucket (burst
    of one second) lets at most twice the limit through in any second. And the shared
    run's per-second counts account for every message."""
    _, results, stderr = run
    rl = next((r for r in results if r["scenario"] == "ratelimited"), None)
    assert rl is not None, stderr
    limited = rl["figures"]["provider_limited"]
    assert 0 < limited["max_accepted_in_1s_window"] <= 2 * limited["provider_limit_per_second"]
    shared = rl["figures"]["shared_ceiling"]
    if rl["backend"] == "embedded":
        assert shared == "not applicable"
    else:
        assert shared["consumer_processes"] == 2
        assert sum(shared["per_second_counts"]) == shared["messages"]


def test_plan_twice_creates_nothing_the_second_time(
    run: tuple[int, list[dict[str, Any]], str],
) -> None:
    _, results, stderr = run
    plan = next((r for r in results if r["scenario"] == "plan"), None)
    assert plan is not None, stderr
    f = plan["figures"]
    assert f["messages_created"] > 0
    assert f["second_run_created"] == 0
    # The third run (window moved on) plans the new slice: stored is what every run created.
    assert f["next_run_created"] > 0
    assert f["stored_messages"] == f["messages_created"] + f["next_run_created"]
    assert all(plan["checks"].values()), plan["checks"]


def test_register_stores_everything_and_plans_it_once(
    run: tuple[int, list[dict[str, Any]], str],
) -> None:
    """Users, devices and reminders through the API (per item and bulk): all stored,
    every reminder planned, nothing planned twice, a repeated import changes nothing."""
    _, results, stderr = run
    register = next((r for r in results if r["scenario"] == "register"), None)
    assert register is not None, stderr
    f = register["figures"]
    assert f["per_item"]["users_fully_registered_per_second"] > 0
    assert f["bulk"]["users_per_second"] > 0
    assert f["stored"]["messages"] > 0
    assert register["checks"] and all(register["checks"].values()), register["checks"]


def test_api_answers_every_case_as_expected_and_stores_it() -> None:
    """``bench api`` (per-item writes, not part of ``all``): every case answered with its
    status, every user, device and reminder stored and planned, figures per case."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TEPAT_")}
    proc = subprocess.run(
        [sys.executable, "-m", "bench", "api", "--users", "40", "--json"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["scenario"] == "api" and result["ok"], result
    assert set(result["figures"]) == {
        "user_new",
        "user_unchanged",
        "device_new",
        "reminder_new",
        "reminder_unchanged",
        "healthz",
    }
    assert all(case["per_second"] > 0 for case in result["figures"].values())
    assert result["checks"]["every_reminder_planned"], result["checks"]


def test_a_failed_correctness_check_makes_the_exit_status_non_zero() -> None:
    """The exit status follows Result.ok, which a lost message turns false."""
    from bench.report import Correctness, Result

    lost = Correctness(expected=10, sent=9, duplicates=0, lost=1)
    twice = Correctness(expected=10, sent=10, duplicates=1, lost=0)
    fine = Correctness(expected=10, sent=10, duplicates=0, lost=0)

    def make(c: Correctness) -> Result:
        return Result("x", "embedded", {}, {}, {"fast": False}, c)

    assert not make(lost).ok
    assert not make(twice).ok
    assert make(fine).ok  # a missed speed goal is not a failure


CHAOS_QUICK = ("kill_consumer", "store_outage")


def chaos_run(
    *args: str, env: dict[str, str] | None = None
) -> tuple[int, list[dict[str, Any]], str]:
    """``bench chaos --quick --json ARGS`` on embedded: exit code, results, stderr's end."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("TEPAT_")}
    proc = subprocess.run(
        [sys.executable, "-m", "bench", "chaos", "--quick", "--json", *args],
        cwd=ROOT,
        env={**base, **(env or {})},
        capture_output=True,
        text=True,
        timeout=300,
    )
    lines = [line for line in proc.stdout.strip().splitlines() if line.startswith("{")]
    return proc.returncode, [json.loads(line) for line in lines], proc.stderr[-4000:]


@cache
def chaos_quick_run() -> tuple[int, list[dict[str, Any]], str]:
    """``bench chaos --quick`` on embedded, the two faults that fit in about 40 s (the
    provider storms wait out the client's 15 s timeout: they run in the bench only)."""
    return chaos_run(*(arg for f in CHAOS_QUICK for arg in ("--fault", f)))


def test_chaos_kill_consumer_and_store_outage_lose_nothing() -> None:
    code, results, stderr = chaos_quick_run()
    assert [r["parameters"]["fault"] for r in results] == list(CHAOS_QUICK), stderr
    assert code == 0, stderr
    for r in results:
        c = r["correctness"]
        assert c["expected"] > 0
        assert (c["lost"], c["duplicates"], c["stuck"]) == (0, 0, 0), (r["parameters"], c)
        assert all(r["checks"].values()), r["checks"]


def test_chaos_store_restart_on_mongo_loses_nothing() -> None:
    # The run's own wire server SIGKILLed while messages fall due, restarted on its port
    # with its storage: nothing lost or stuck, no copy outside the window.
    venv = wire_server_venv()
    args = ("--store", "mongo", "--fault", "store_restart")
    code, results, stderr = chaos_run(*args, env={"TEPAT_MONGO_WIRE_VENV": str(venv)})
    assert [(r["parameters"]["fault"], r["parameters"]["store"]) for r in results] == [
        ("store_restart", "mongo")
    ], stderr
    assert code == 0, stderr
    r = results[0]
    c = r["correctness"]
    assert c["expected"] > 0
    assert (c["lost"], c["duplicates"], c["stuck"]) == (0, 0, 0), c
    assert all(r["checks"].values()), r["checks"]
    # the kill came before the burst was through: some messages fell due while it was down
    [outage] = r["figures"]["outages"]
    assert outage["arrived_before_kill"] < c["expected"], outage


def test_chaos_refuses_a_fault_its_store_cannot_have() -> None:
    code, results, stderr = chaos_run("--fault", "store_restart")
    assert (code, results) == (1, [])
    assert stderr.strip().splitlines()[-1] == "bench chaos: store_restart needs --store mongo"
