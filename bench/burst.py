"""The burst scenario (see ``bench/README.md``)."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from bench.delivery import Plan, categories_round_robin, deliver
from bench.report import Result, log
from bench.scenarios import EXPO_LIMIT, _checks, _common, _seconds


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
