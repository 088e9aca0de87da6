"""A spreadsheet-grade capacity model of sending, from dispatch's measured CPU costs.

``python -m bench capacity [--from DISPATCH.json] [--tolerance 0.15] [--json]``

Inputs, all measured by ``bench dispatch`` (bench/scenarios.py ``cpu_figures``): the CPU
milliseconds one notification costs each component (the consumer processes' work, with the
SQLite store inside them; the broker; the provider sandbox; the harness), what a consumer
process costs per second while it idles (``b``, cores: timers, heartbeats), and the cores
each run had (the machine's minus the other work that ran meanwhile: the machine is
shared). The model, for N consumer processes on C cores:

    X(N, C) = min(N * (p - b) * 1000 / consumer_ms,   what one process can keep busy: p
                  (C - N * b) * 1000 / total_ms,      the cores, shared by every component
                  store ceiling, provider ceiling)

``p`` (``--process-cores``, 1 by default: one event loop) is the cores one consumer process
can keep busy; its SQLite threads release the GIL, so it may be more (docs/SCALING.md).

It first reproduces the measured 1, 2, 3 consumer points from the median costs and each
run's cores (exit status 1 when a point is off by more than the tolerance), then sizes the
seed's loads (5,800/s average, 50,000/s peak) on machines of 2, 8 and 16 cores.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

EXPO_PER_PROJECT = 600.0  # notifications/s Expo accepts per project (TEPAT_EXPO_RATE_LIMIT)
TARGETS = {"average": 5_800.0, "peak": 50_000.0}  # the seed documents' loads
MACHINES = (2, 8, 16)  # cores
TOLERANCE = 0.15


@dataclass(frozen=True)
class Costs:
    """CPU milliseconds per notification of each component."""

    consumer: float  # every consumer process's work together; the store's when SQLite
    broker: float = 0.0
    provider: float = 0.0  # the sandbox, when it shares the machine (never in production)
    store: float = 0.0  # a store server of its own (MongoDB: not measured here)
    harness: float = 0.0  # the bench's own (its polling of the store)
    idle_cores: float = 0.0  # what one consumer process costs per second, idle (not per ms)
    process_cores: float = 1.0  # what one consumer process can keep busy (not a cost)

    @property
    def total(self) -> float:
        return self.consumer + self.broker + self.provider + self.store + self.harness


@dataclass(frozen=True)
class Point:
    """One measured dispatch run."""

    consumers: int
    cores: float  # what the run had: the machine's cores minus other work's
    measured: float  # notifications/s
    costs: Costs


def throughput(
    consumers: int,
    cores: float,
    costs: Costs,
    store_ceiling: float | None = None,
    provider_ceiling: float | None = None,
) -> float:
    """Notifications/s of ``consumers`` processes on ``cores`` cores: the lowest ceiling."""
    b = costs.idle_cores
    ceilings = [
        consumers * (costs.process_cores - b) * 1000 / costs.consumer,
        max(0.0, cores - consumers * b) * 1000 / costs.total,
    ]
    ceilings += [c for c in (store_ceiling, provider_ceiling) if c is not None]
    return min(ceilings)


def median_costs(points: Sequence[Point], process_cores: float = 1.0) -> Costs:
    """The model's one set of costs: a notification costs the same whatever N (checked by
    reproducing every point with it). The median of each component over the runs: on a
    shared broker one run's figure can carry another client's burst."""
    median = statistics.median
    return Costs(
        consumer=median([p.costs.consumer for p in points]),
        broker=median([p.costs.broker for p in points]),
        provider=median([p.costs.provider for p in points]),
        store=median([p.costs.store for p in points]),
        harness=median([p.costs.harness for p in points]),
        idle_cores=median([p.costs.idle_cores for p in points]),
        process_cores=process_cores,
    )


@dataclass(frozen=True)
class Check:
    consumers: int
    cores: float
    measured: float
    predicted: float

    @property
    def error(self) -> float:
        """(predicted - measured) / measured."""
        return (self.predicted - self.measured) / self.measured


def reproduce(points: Sequence[Point], costs: Costs) -> list[Check]:
    return [
        Check(p.consumers, p.cores, p.measured, throughput(p.consumers, p.cores, costs))
        for p in sorted(points, key=lambda p: p.consumers)
    ]


@dataclass(frozen=True)
class Sizing:
    """What a load needs when consumers have machines of their own (the provider remote,
    the broker and the store elsewhere)."""

    load: float
    cores_per_machine: int
    consumer_processes: int
    cores_per_process: float  # what each keeps busy at most (the model's p)
    broker_cores: float
    store_cores: float | None  # None: not measured (a store server of its own)
    expo_projects: int  # the provider's ceiling: 600/s per project

    @property
    def consumer_machines(self) -> int:
        return math.ceil(self.consumer_processes * self.cores_per_process / self.cores_per_machine)


def size(load: float, cores: int, costs: Costs) -> Sizing:
    per_process = (costs.process_cores - costs.idle_cores) * 1000 / costs.consumer
    processes = math.ceil(load / per_process)
    return Sizing(
        load=load,
        cores_per_machine=cores,
        consumer_processes=processes,
        cores_per_process=costs.process_cores,
        broker_cores=round(load * costs.broker / 1000, 2),
        store_cores=round(load * costs.store / 1000, 2) if costs.store else None,
        expo_projects=math.ceil(load / EXPO_PER_PROJECT),
    )


def points_from_dispatch(result: dict[str, Any]) -> list[Point]:
    """The points of one ``bench dispatch --json`` line (runs marked "not applicable"
    and runs without CPU figures are left out)."""
    points: list[Point] = []
    for key, run in result["figures"].items():
        if not key.startswith("consumers_") or not isinstance(run, dict):
            continue
        cpu = run.get("cpu_ms_per_notification")
        if not cpu:
            continue
        machine = run["machine"]
        points.append(
            Point(
                consumers=int(key.removeprefix("consumers_")),
                cores=round(machine["cores"] - machine["other_work_cores"], 2),
                measured=float(run["messages_per_second"]),
                costs=Costs(
                    consumer=cpu["consumers_work"],
                    broker=cpu.get("broker") or 0.0,
                    provider=cpu.get("sandbox") or 0.0,
                    harness=cpu.get("harness") or 0.0,
                    idle_cores=sum(idle) / len(idle) if (idle := run["consumer_idle_cores"]) else 0,
                ),
            )
        )
    return sorted(points, key=lambda p: p.consumers)


# `bench dispatch --backend activemq --messages 20000` on 2026-12-02, a 2-core machine
# other work kept busy (docs/SCALING.md, "How many processes"): the default input, so that
# the table in the docs can be re-derived.
MEASURED: tuple[Point, ...] = (
    Point(1, 0.70, 1177.0, Costs(0.4213, 0.1377, 0.053, 0.0, 0.0138, idle_cores=0.0029)),
    Point(2, 0.57, 1030.0, Costs(0.3875, 0.1236, 0.052, 0.0, 0.0155, idle_cores=0.00225)),
    Point(3, 0.32, 601.0, Costs(0.4174, 0.0319, 0.055, 0.0, 0.0253, idle_cores=0.0022)),
)


def report(points: Sequence[Point], tolerance: float, process_cores: float = 1.0) -> dict[str, Any]:
    costs = median_costs(points, process_cores)
    checks = reproduce(points, costs)
    sizings = [size(load, cores, costs) for load in TARGETS.values() for cores in MACHINES]
    return {
        "costs_ms_per_notification": {**asdict(costs), "total": round(costs.total, 4)},
        "reproduced": [
            {**asdict(c), "error": round(c.error, 3), "within": abs(c.error) <= tolerance}
            for c in checks
        ],
        "tolerance": tolerance,
        "ok": all(abs(c.error) <= tolerance for c in checks),
        "sizing": [{**asdict(s), "consumer_machines": s.consumer_machines} for s in sizings],
    }


def _print(out: dict[str, Any]) -> None:
    c = dict(out["costs_ms_per_notification"])
    idle, most = c.pop("idle_cores"), c.pop("process_cores")
    print(
        "CPU ms per notification (median of the runs): "
        + ", ".join(f"{k} {v:.4f}" for k, v in c.items())
        + f"; an idle consumer process: {idle:.3f} cores; a busy one: {most:g} at most"
    )
    print("\nconsumers  cores had  measured/s  predicted/s  error")
    for r in out["reproduced"]:
        flag = "" if r["within"] else f"  OFF (> {out['tolerance']:.0%})"
        print(
            f"{r['consumers']:>9}  {r['cores']:>9.2f}  {r['measured']:>10.0f}  "
            f"{r['predicted']:>11.0f}  {r['error']:>+5.1%}{flag}"
        )
    print("\nload/s  cores/machine  consumer processes  machines  broker cores  Expo projects")
    for s in out["sizing"]:
        print(
            f"{s['load']:>6.0f}  {s['cores_per_machine']:>13}  {s['consumer_processes']:>18}  "
            f"{s['consumer_machines']:>8}  {s['broker_cores']:>12.2f}  {s['expo_projects']:>13}"
        )
    print(
        f"\nprovider ceiling: Expo takes {EXPO_PER_PROJECT:.0f}/s per project; the store "
        "server's ceiling is not measured (SQLite runs inside the consumers)"
    )


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(
        prog="python -m bench capacity", description=__doc__.split("\n\n")[0]
    )
    p.add_argument(
        "--from",
        dest="source",
        type=Path,
        help="a `bench dispatch --json` output (its last line); default: the measured "
        "figures in docs/SCALING.md",
    )
    p.add_argument("--tolerance", type=float, default=TOLERANCE)
    p.add_argument(
        "--process-cores",
        type=float,
        default=1.0,
        help="cores one consumer process can keep busy (default 1: its event loop)",
    )
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    if args.source:
        last = args.source.read_text().strip().splitlines()[-1]
        points = points_from_dispatch(json.loads(last))
    else:
        points = list(MEASURED)
    if not points:
        print("no dispatch run with CPU figures to model", file=sys.stderr)
        return 2
    out = report(points, args.tolerance, args.process_cores)
    if args.json:
        print(json.dumps(out))
    else:
        _print(out)
    return 0 if out["ok"] else 1
