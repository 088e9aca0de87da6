"""The delivery scenarios dispatch and lateness (see ``bench/README.md``); ratelimited and
burst live in bench/ratelimited.py and bench/burst.py."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

from bench.delivery import Outcome, Plan, categories_round_robin, deliver, percentile
from bench.report import Result, log

EXPO_LIMIT = 600.0
UNLIMITED_CLIENT = 1_000_000.0  # lift the client's own 600/s when the sandbox is unlimited


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
    workdir: Path, broker_url: str, prefix: str, messages: int, consumers: int
) -> Outcome:
    plan = Plan(
        items=[(0.0, c) for c in categories_round_robin(messages)],
        consumers=consumers,
        client_rate_limit=UNLIMITED_CLIENT,
    )
    return deliver(workdir, broker_url, prefix, plan)


def rate_of(o: Outcome) -> float:
    return len(o.due) / max(1e-9, _seconds(o.last_sent, o.start))


def run_dispatch(
    workdir: Path, backend: str, broker_url: str, prefix: str, messages: int
) -> Result:
    runs: dict[int, Outcome] = {}
    for consumers in (1, 2):
        if backend == "embedded" and consumers == 2:
            continue
        log(f"dispatch: {messages} due messages, {consumers} consumer process(es)")
        runs[consumers] = dispatch_once(
            workdir / f"dispatch-{consumers}",
            broker_url,
            prefix + f"c{consumers}.",
            messages,
            consumers,
        )
    figures: dict[str, Any] = {}
    for k, o in runs.items():
        rate = rate_of(o)
        figures[f"consumers_{k}"] = {
            "messages_per_second": round(rate),
            "messages_per_second_per_consumer": round(rate / k),
            "drain_seconds": round(_seconds(o.last_sent, o.start), 2),
            **_common(o),
        }
    notes = [
        "messages/s = messages / (last `sent` stamp in the store - the instant they fell due); "
        "the sandbox is unlimited and the client's own 600/s limit is lifted",
    ]
    if backend == "embedded":
        figures["consumers_2"] = "not applicable"
        notes.append(
            "embedded: the broker lives inside one process, so a second consumer process "
            "cannot share its queues; 2 consumer processes need ActiveMQ"
        )
    one = runs[1]
    goals = {"one_consumer_messages_per_second>=3000": rate_of(one) >= 3000}
    merged = _merge([o for o in runs.values()])
    return Result(
        scenario="dispatch",
        backend=backend,
        parameters={"messages": messages, "consumer_processes": sorted(runs)},
        figures=figures,
        goals=goals,
        correctness=merged,
        checks={k: all(_checks(o)[k] for o in runs.values()) for k in _checks(one)},
        notes=notes,
    )


def _merge(outcomes: list[Outcome]) -> Any:
    """One Correctness over several runs (sums; the per-run details of the worst)."""
    from bench.report import Correctness

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


def run_lateness(
    workdir: Path,
    backend: str,
    broker_url: str,
    prefix: str,
    seconds: int,
    capacity: float,
    max_rate: float | None = None,
) -> Result:
    rate = max(1, round(capacity / 2 if max_rate is None else min(capacity / 2, max_rate)))
    items = [(float(s), c) for s in range(seconds) for c in categories_round_robin(rate)]
    log(f"lateness: {rate}/s due for {seconds}s ({len(items)} messages; capacity {capacity:.0f}/s)")
    o = deliver(
        workdir / "lateness",
        broker_url,
        prefix,
        Plan(items=items, client_rate_limit=UNLIMITED_CLIENT),
    )
    late = [
        _seconds(o.arrivals[mid], d.scheduled_at) * 1000
        for mid, d in o.due.items()
        if mid in o.arrivals
    ]
    figures = {
        "lateness_ms_p50": round(percentile(late, 50), 1),
        "lateness_ms_p99": round(percentile(late, 99), 1),
        "lateness_ms_max": round(max(late, default=float("nan")), 1),
        "lateness_ms_min": round(min(late, default=float("nan")), 1),
        "early_messages": sum(1 for x in late if x < 0),
        **_common(o),
    }
    return Result(
        scenario="lateness",
        backend=backend,
        parameters={
            "due_per_second": rate,
            "seconds": seconds,
            "messages": len(items),
            "measured_capacity_per_second": round(capacity),
            "instants": "whole seconds, categories round-robin",
        },
        figures=figures,
        goals={"p99<=500ms": percentile(late, 99) <= 500},
        correctness=o.correctness,
        checks={**_checks(o), "none_early": figures["early_messages"] == 0},
        notes=[
            "lateness = the sandbox's arrival time - the scheduled instant; the sandbox is "
            "unlimited and the client's 600/s limit lifted, at about half the measured capacity",
        ],
    )
