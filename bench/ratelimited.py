"""The ratelimited scenario (see ``bench/README.md``)."""

from __future__ import annotations

from pathlib import Path

from bench.delivery import Plan, categories_round_robin, deliver
from bench.report import Result, log
from bench.scenarios import EXPO_LIMIT, _checks, _common, _seconds, rate_of


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
