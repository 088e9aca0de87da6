"""The delivery scenarios: dispatch, ratelimited, lateness and burst (see ``bench/README.md``)."""

from __future__ import annotations

from collections import defaultdict
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


def run_ratelimited(
    workdir: Path, backend: str, broker_url: str, prefix: str, messages: int
) -> Result:
    log(f"ratelimited: {messages} due messages, sandbox at {EXPO_LIMIT:g}/s")
    o = deliver(
        workdir / "ratelimited",
        broker_url,
        prefix,
        Plan(
            items=[(0.0, c) for c in categories_round_robin(messages)],
            sandbox_rate_limit=EXPO_LIMIT,
        ),
    )
    rate = rate_of(o)
    arrivals = sorted(o.arrivals.values())
    window = _seconds(arrivals[-1], arrivals[0]) if len(arrivals) > 1 else 0.0
    figures = {
        "send_rate_per_second": round(rate, 1),
        "fraction_of_limit": round(rate / EXPO_LIMIT, 3),
        "sandbox_arrival_rate_per_second": round((len(arrivals) - 1) / window, 1)
        if window
        else None,
        "drain_seconds": round(_seconds(o.last_sent, o.start), 2),
        **_common(o),
    }
    goals = {
        "rate>=95%_of_limit": rate >= 0.95 * EXPO_LIMIT,
        "zero_429s": o.sandbox_stats.get("too_many_requests", 0) == 0,
        "zero_duplicates": o.correctness.duplicates == 0,
    }
    return Result(
        scenario="ratelimited",
        backend=backend,
        parameters={"messages": messages, "limit_per_second": EXPO_LIMIT, "consumer_processes": 1},
        figures=figures,
        goals=goals,
        correctness=o.correctness,
        checks=_checks(o),
        notes=[
            "send rate = messages / (last `sent` stamp - due instant); the client keeps "
            "Tepat's default 600/s token bucket (burst of one 100-notification request)",
        ],
    )


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


def run_burst(workdir: Path, backend: str, broker_url: str, prefix: str, messages: int) -> Result:
    log(f"burst: {messages} messages due at one instant, sandbox at {EXPO_LIMIT:g}/s")
    o = deliver(
        workdir / "burst",
        broker_url,
        prefix,
        Plan(
            items=[(0.0, c) for c in categories_round_robin(messages)],
            sandbox_rate_limit=EXPO_LIMIT,
        ),
    )
    ideal = messages / EXPO_LIMIT
    last = max(o.arrivals.values(), default=o.start)
    drain = _seconds(last, o.t0)
    spans: dict[str, list[float]] = defaultdict(list)
    for mid, d in o.due.items():
        if mid in o.arrivals:
            spans[d.category].append(_seconds(o.arrivals[mid], o.t0))
    order = sorted(spans, key=lambda c: max(spans[c]))
    per_category = {
        c: {"first_s": round(min(v), 2), "last_s": round(max(v), 2), "count": len(v)}
        for c, v in sorted(spans.items(), key=lambda kv: max(kv[1]))
    }
    safety_last = max(spans.get("safety", [float("nan")]))
    meal_first = min(spans.get("meal", [float("nan")]))
    meal_last = max(spans.get("meal", [float("nan")]))
    figures = {
        "drain_seconds": round(drain, 2),
        "ideal_seconds": round(ideal, 2),
        "drain_over_ideal": round(drain / ideal, 3),
        "drained_order": order,
        "safety_last_s": round(safety_last, 2),
        "meal_first_s": round(meal_first, 2),
        "meal_last_s": round(meal_last, 2),
        "per_category": per_category,
        **_common(o),
    }
    return Result(
        scenario="burst",
        backend=backend,
        parameters={"messages": messages, "limit_per_second": EXPO_LIMIT, "categories": len(spans)},
        figures=figures,
        goals={
            "drain<=1.05x_ideal": drain <= 1.05 * ideal,
            "safety_done_before_meal_starts": safety_last <= meal_first,
            "zero_429s": o.sandbox_stats.get("too_many_requests", 0) == 0,
        },
        correctness=o.correctness,
        checks=_checks(o),
        notes=[
            "drain = last arrival at the sandbox - the shared due instant; ideal = K / 600",
        ],
    )
