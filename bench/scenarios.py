"""The delivery scenarios dispatch and lateness (see ``bench/README.md``); ratelimited and
burst live in bench/ratelimited.py and bench/burst.py."""

from __future__ import annotations

import os
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol

from bench.delivery import Outcome, Plan, categories_round_robin, deliver, percentile
from bench.report import Correctness, Result, log

EXPO_LIMIT = 600.0
UNLIMITED_CLIENT = 1_000_000.0  # lift the client's own 600/s when the sandbox is unlimited
DISPATCH_GOAL = 5000  # msg/s with one consumer process, either broker (issue 10)


def _common(o: Outcome) -> dict[str, Any]:
    return {
        "consumer_peak_rss_mb": o.peak_rss_mb,
        "sandbox_429s": o.sandbox_stats.get("too_many_requests", 0),
        "sandbox_send_requests": o.sandbox_stats.get("send_requests", 0),
        "ready_margin_s": o.ready_margin_s,
    }


def _checks(o: Outcome) -> dict[str, bool]:
    return {"consumers_exited_cleanly": all(c.returncode == 0 for c in o.consumers)}


def _seconds(a: datetime, b: datetime) -> float:
    return (a - b).total_seconds()


def dispatch_once(
    workdir: Path,
    broker_url: str,
    prefix: str,
    messages: int,
    consumers: int,
    provider: str = "expo",
) -> Outcome:
    plan = Plan(
        items=[(0.0, c) for c in categories_round_robin(messages)],
        consumers=consumers,
        client_rate_limit=UNLIMITED_CLIENT,
        provider=provider,
    )
    return deliver(workdir, broker_url, prefix, plan)


def rate_of(o: Outcome) -> float:
    return len(o.due) / max(1e-9, _seconds(o.last_sent, o.start))


def cpu_figures(o: Outcome) -> dict[str, Any]:
    """CPU ms per notification per component (the capacity model's inputs,
    bench/capacity.py), each consumer process's busy share of a core, and how much of the
    machine the run had: other work's cores are the busy ones no process of the run used."""
    if o.cpu is None:
        return {}
    w, n = o.cpu, len(o.due)
    consumers = {k: v for k, v in w.cpu_seconds.items() if k.startswith("consumer-")}
    idle = {k: w.idle_cores.get(k, 0.0) for k in consumers}
    ours = sum(w.cpu_seconds.values())
    # what the consumers spent on the notifications: their CPU minus what idling for as
    # long would have cost (timers, heartbeats: a fixed cost per process and second)
    work = sum(consumers.values()) - sum(idle.values()) * w.wall_seconds

    def per(name: str) -> float | None:
        return round(w.cpu_seconds[name] / n * 1000, 4) if name in w.cpu_seconds else None

    return {
        "cpu_ms_per_notification": {
            "consumers": round(sum(consumers.values()) / n * 1000, 4),
            "consumers_work": round(max(0.0, work) / n * 1000, 4),
            "broker": per("broker"),
            "sandbox": per("sandbox"),
            "harness": per("harness"),
        },
        "consumer_busy_cores": [round(v / w.wall_seconds, 2) for v in consumers.values()],
        "consumer_idle_cores": [round(v, 4) for v in idle.values()],
        "cpu_window_seconds": round(w.wall_seconds, 2),
        "machine": {
            "cores": os.cpu_count(),
            "busy_cores": round(w.machine_busy_seconds / w.wall_seconds, 2),
            "other_work_cores": round(max(0.0, w.machine_busy_seconds - ours) / w.wall_seconds, 2),
        },
    }


DISPATCH_CONSUMERS = (1, 2, 3)


def run_dispatch(
    workdir: Path,
    backend: str,
    broker_url: str,
    prefix: str,
    messages: int,
    consumer_counts: Sequence[int] = DISPATCH_CONSUMERS,
    provider: str = "expo",
) -> Result:
    runs: dict[int, Outcome] = {}
    for consumers in consumer_counts:
        if backend == "embedded" and consumers > 1:
            continue
        log(f"dispatch: {messages} due {provider} messages, {consumers} consumer process(es)")
        runs[consumers] = dispatch_once(
            workdir / f"dispatch-{consumers}",
            broker_url,
            prefix + f"c{consumers}.",
            messages,
            consumers,
            provider,
        )
    figures: dict[str, Any] = {}
    for k, o in runs.items():
        rate = rate_of(o)
        figures[f"consumers_{k}"] = {
            "messages_per_second": round(rate),
            "messages_per_second_per_consumer": round(rate / k),
            "drain_seconds": round(_seconds(o.last_sent, o.start), 2),
            **_common(o),
            **cpu_figures(o),
        }
    notes = [
        "messages/s = messages / (last `sent` stamp in the store - the instant they fell due); "
        "the sandbox is unlimited and the client's own 600/s limit is lifted",
    ]
    notes.append(
        "cpu_ms_per_notification: CPU seconds (/proc) of each component from just before the "
        "messages were published until none was left, per message; the broker's rate before "
        "the run (other clients of a shared broker) is subtracted; consumers_work also "
        "leaves out the consumers' idle rate before the run (consumer_idle_cores) over the "
        "window; the store (SQLite) runs inside the consumers and the harness, so its cost "
        "is in theirs"
    )
    if backend == "embedded":
        for k in consumer_counts:
            if k > 1:
                figures[f"consumers_{k}"] = "not applicable"
        notes.append(
            "embedded: the broker lives inside one process, so a second consumer process "
            "cannot share its queues; 2 or more consumer processes need ActiveMQ"
        )
    one = runs[1]
    figures["consumers_1"]["goal_messages_per_second"] = DISPATCH_GOAL
    for k, o in runs.items():
        if k > 1:
            figures[f"consumers_{k}"]["scaling_vs_1"] = round(rate_of(o) / rate_of(one), 2)
    goals = {f"one_consumer_messages_per_second>={DISPATCH_GOAL}": rate_of(one) >= DISPATCH_GOAL}
    merged = _merge([o for o in runs.values()])
    return Result(
        scenario="dispatch",
        backend=backend,
        parameters={
            "messages": messages,
            "consumer_processes": sorted(runs),
            "provider": provider,
        },
        figures=figures,
        goals=goals,
        correctness=merged,
        checks={k: all(_checks(o)[k] for o in runs.values()) for k in _checks(one)},
        notes=notes,
    )


class _Tallied(Protocol):
    correctness: Correctness


def _merge(outcomes: Sequence[_Tallied]) -> Any:
    """One Correctness over several runs (sums; each run's details, ``run_<n>``)."""
    first = outcomes[0].correctness
    if len(outcomes) == 1:
        return first
    total = Correctness(
        expected=sum(o.correctness.expected for o in outcomes),
        sent=sum(o.correctness.sent for o in outcomes),
        duplicates=sum(o.correctness.duplicates for o in outcomes),
        lost=sum(o.correctness.lost for o in outcomes),
        details={
            "tokens_received_twice": sum(
                o.correctness.details.get("tokens_received_twice", 0) for o in outcomes
            ),
            **{f"run_{i + 1}": o.correctness.as_dict() for i, o in enumerate(outcomes)},
        },
    )
    return total


LATENESS_RATES = (100.0, 300.0, 600.0, 1200.0)


def lateness_goal_ms(rate: float, provider: str = "expo") -> float:
    """The p99 goal at ``rate`` due per second: through Expo 100 ms up to 600/s, 250 ms
    above (issue 10); FCM and APNs direct, with no 600/s ceiling, 100 ms (issue 22)."""
    return 100.0 if rate <= 600 or provider != "expo" else 250.0


def run_lateness(
    workdir: Path,
    backend: str,
    broker_url: str,
    prefix: str,
    rates: Sequence[float],
    seconds: int,
    provider: str = "expo",
) -> Result:
    """One delivery run per rate: ``rate`` messages due at each whole second for ``seconds``."""
    figures: dict[str, Any] = {}
    goals: dict[str, bool] = {}
    outcomes: list[Outcome] = []
    early_total = 0
    for rate in rates:
        per_second = max(1, round(rate))
        items = [(float(s), c) for s in range(seconds) for c in categories_round_robin(per_second)]
        log(f"lateness: {per_second}/s {provider} due for {seconds}s ({len(items)} messages)")
        o = deliver(
            workdir / f"lateness-{per_second}",
            broker_url,
            f"{prefix}r{per_second}.",
            Plan(items=items, client_rate_limit=UNLIMITED_CLIENT, provider=provider),
        )
        outcomes.append(o)
        late = [
            _seconds(o.arrivals[mid], d.scheduled_at) * 1000
            for mid, d in o.due.items()
            if mid in o.arrivals
        ]
        # Early = a send that left before its instant: the sent stamp (taken after the
        # provider answered) or the sandbox's arrival earlier than the scheduled instant.
        early = sum(1 for x in late if x < 0)
        early_total += early
        goal = lateness_goal_ms(per_second, provider)
        p99 = percentile(late, 99)
        figures[f"rate_{per_second}"] = {
            "lateness_ms_p50": round(percentile(late, 50), 1),
            "lateness_ms_p99": round(p99, 1),
            "goal_p99_ms": goal,
            "lateness_ms_max": round(max(late, default=float("nan")), 1),
            "lateness_ms_min": round(min(late, default=float("nan")), 1),
            "early_messages": early,
            "goal_early": 0,
            **_common(o),
        }
        log(
            f"lateness {per_second}/s: p50 {percentile(late, 50):.0f} ms, p99 {p99:.0f} ms "
            f"(goal <= {goal:.0f} ms), max {max(late, default=float('nan')):.0f} ms, "
            f"early {early} (goal 0)"
        )
        goals[f"rate_{per_second}_p99<={goal:.0f}ms"] = p99 <= goal
    return Result(
        scenario="lateness",
        backend=backend,
        parameters={
            "due_per_second": [max(1, round(r)) for r in rates],
            "seconds": seconds,
            "messages": sum(len(o.due) for o in outcomes),
            "consumer_processes": 1,
            "instants": "whole seconds, categories round-robin",
            "provider": provider,
        },
        figures=figures,
        goals=goals,
        correctness=_merge(outcomes),
        checks={
            **{k: all(_checks(o)[k] for o in outcomes) for k in _checks(outcomes[0])},
            "none_early": early_total == 0,
        },
        notes=[
            "lateness = the sandbox's arrival time - the scheduled instant; the sandbox is "
            "unlimited and the client's 600/s limit lifted; one consumer process",
            "goal: p99 <= 100 ms up to 600/s, <= 250 ms at 1,200/s through Expo, <= 100 ms "
            "at any rate through FCM or APNs; early must be 0",
        ],
    )
