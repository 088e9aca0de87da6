"""The apps scenario (issue 23, see ``bench/README.md``): one app's flood does not make
another app's critical messages late.

One deployment, one consumer process, two registered apps, each with its own Expo access
token; the Expo sandbox limits each token (each Expo project) to CEILING notifications/s,
and each app's ``expo_rate_limit`` is that ceiling. App ``a`` keeps a critical reserve of
RESERVE_A. Two runs:

* **baseline**: ``b`` alone sends ``safety`` messages at B_CRITICAL_PER_SECOND;
* **flood**: ``a`` has bulk (every category but ``safety``) due at FLOOD_FACTOR x its
  ceiling for the flood's seconds, and ``safety`` messages of its own at
  A_CRITICAL_PER_SECOND, while ``b`` sends the same stream as in the baseline.

Both streams last as long as ``a``'s flood ideally drains: bulk / ((1 - RESERVE_A) x
CEILING). Lateness = the sandbox's arrival time - the scheduled instant.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench.apps_rig import AppPlan, AppsOutcome, deliver_apps
from bench.delivery import categories_round_robin, percentile
from bench.report import Result, log
from bench.scenarios import _merge

CEILING = 100.0  # each app's expo_rate_limit and the sandbox's limit per access token
FLOOD_FACTOR = 5
RESERVE_A = 0.2
B_CRITICAL_PER_SECOND = 10
A_CRITICAL_PER_SECOND = 2
FLOOD_SECONDS = 10
QUICK_FLOOD_SECONDS = 2
# B's p99 in the flood may be at most this much worse than alone: twice its baseline, or
# its baseline plus RULE_SLACK_MS, whichever is more (a baseline of a few ms doubled is
# within one event-loop turn of a busy process).
RULE_FACTOR = 2.0
RULE_SLACK_MS = 50.0


def b_rule_ms(baseline_p99_ms: float) -> float:
    """The p99 B's critical messages must stay within during A's flood."""
    return max(RULE_FACTOR * baseline_p99_ms, baseline_p99_ms + RULE_SLACK_MS)


def _app(app_id: str, items: list[tuple[float, str]], first: int, **settings: Any) -> AppPlan:
    return AppPlan(
        app_id=app_id,
        access_token=f"bench-{app_id}-expo-access-token",
        settings={"expo_rate_limit": CEILING, **settings},
        items=items,
        first=first,
    )


def _lateness_ms(o: AppsOutcome, app_id: str, critical: bool) -> list[float]:
    return [
        (o.arrivals[mid] - d.scheduled_at).total_seconds() * 1000
        for mid, d in o.due[app_id].items()
        if mid in o.arrivals and (d.category == "safety") == critical
    ]


def _summary(late_ms: list[float], digits: int = 1) -> dict[str, Any]:
    return {
        "messages": len(late_ms),
        "p50_ms": round(percentile(late_ms, 50), digits),
        "p99_ms": round(percentile(late_ms, 99), digits),
        "max_ms": round(max(late_ms, default=float("nan")), digits),
    }


def run_apps(
    workdir: Path, backend: str, broker_url: str, prefix: str, flood_seconds: int
) -> Result:
    bulk = round(FLOOD_FACTOR * CEILING * flood_seconds)
    window = bulk / ((1 - RESERVE_A) * CEILING)
    b_items = [
        (k / B_CRITICAL_PER_SECOND, "safety") for k in range(int(window * B_CRITICAL_PER_SECOND))
    ]
    per_second = round(FLOOD_FACTOR * CEILING)
    # Due at whole seconds, as a campaign is: a batch per category and second.
    flood = [c for c in categories_round_robin(bulk * 2) if c != "safety"][:bulk]
    a_items = [(float(i // per_second), c) for i, c in enumerate(flood)]
    a_items += [
        (k / A_CRITICAL_PER_SECOND, "safety") for k in range(int(window * A_CRITICAL_PER_SECOND))
    ]
    a_idle = _app("a", [], 0, critical_reserve=RESERVE_A)
    b = _app("b", b_items, 1_000_000)
    log(
        f"apps: baseline, b alone: {len(b_items)} safety at {B_CRITICAL_PER_SECOND}/s over "
        f"{window:g}s, each app's ceiling {CEILING:g}/s (the sandbox's per access token)"
    )
    base = deliver_apps(workdir / "baseline", broker_url, prefix + "base.", [a_idle, b], CEILING)
    log(
        f"apps: flood, a: {bulk} bulk due at {FLOOD_FACTOR}x its ceiling over {flood_seconds}s "
        f"and safety at {A_CRITICAL_PER_SECOND}/s (reserve {RESERVE_A:g}); b as in the baseline"
    )
    a = _app("a", a_items, 0, critical_reserve=RESERVE_A)
    run = deliver_apps(workdir / "flood", broker_url, prefix + "flood.", [a, b], CEILING)

    b_base = _summary(_lateness_ms(base, "b", True))
    b_flood = _summary(_lateness_ms(run, "b", True))
    a_critical = _summary(_lateness_ms(run, "a", True))
    a_bulk_ms = _lateness_ms(run, "a", False)
    a_bulk_arrivals = [
        run.arrivals[m]
        for m, d in run.due["a"].items()
        if m in run.arrivals and d.category != "safety"
    ]
    drain = (max(a_bulk_arrivals) - run.t0).total_seconds() if a_bulk_arrivals else float("nan")
    rule = b_rule_ms(b_base["p99_ms"])
    reserve_a = run.reserve_used.get("a", 0.0)
    figures = {
        "baseline_b_critical": b_base,
        "flood_b_critical": b_flood,
        "b_rule_p99_ms": round(rule, 1),
        "flood_a_critical": a_critical,
        "flood_a_bulk": {
            "messages": len(a_bulk_ms),
            "p50_s": round(percentile(a_bulk_ms, 50) / 1000, 2),
            "p99_s": round(percentile(a_bulk_ms, 99) / 1000, 2),
            "drain_seconds": round(drain, 2),
            "ideal_drain_seconds": round(window, 2),
        },
        "a_critical_reserve_used": reserve_a,
        "b_critical_reserve_used": run.reserve_used.get("b", 0.0),
        "responses_429": {"baseline": base.responses_429, "flood": run.responses_429},
        "ready_margin_s": {"baseline": base.ready_margin_s, "flood": run.ready_margin_s},
        "consumer_peak_rss_mb": max(base.consumer.peak_rss_mb, run.consumer.peak_rss_mb),
    }
    goals = {
        f"b_p99_in_flood<=max({RULE_FACTOR:g}x_baseline,baseline+{RULE_SLACK_MS:g}ms)": (
            b_flood["p99_ms"] <= rule
        ),
        "a_critical_used_its_reserve": reserve_a > 0,
        "a_critical_p99<a_bulk_p50": a_critical["p99_ms"] < percentile(a_bulk_ms, 50),
        "b_zero_429s": run.responses_429["b"] == 0 and base.responses_429["b"] == 0,
        "a_bulk_drain<=1.2x_ideal": drain <= 1.2 * window,
    }
    log(
        f"apps: b p99 {b_base['p99_ms']:.0f} ms alone, {b_flood['p99_ms']:.0f} ms in a's "
        f"flood (rule <= {rule:.0f} ms); a critical p99 {a_critical['p99_ms']:.0f} ms, "
        f"reserve used {reserve_a:g}; a bulk drained in {drain:.1f}s (ideal {window:.1f}s)"
    )
    return Result(
        scenario="apps",
        backend=backend,
        parameters={
            "apps": 2,
            "ceiling_per_second": CEILING,
            "flood_factor": FLOOD_FACTOR,
            "flood_seconds": flood_seconds,
            "a_bulk": bulk,
            "a_critical_reserve": RESERVE_A,
            "a_critical_per_second": A_CRITICAL_PER_SECOND,
            "b_critical_per_second": B_CRITICAL_PER_SECOND,
            "stream_seconds": round(window, 2),
            "consumer_processes": 1,
        },
        figures=figures,
        goals=goals,
        correctness=_merge([base, run]),
        checks={
            "consumer_exited_cleanly": base.consumer.returncode == run.consumer.returncode == 0,
        },
        notes=[
            "lateness = the sandbox's arrival - the scheduled instant; one consumer process "
            "serves both apps, each app a runtime of its own (store, queues, Expo client and "
            "bucket); the sandbox limits each access token, as Expo limits each project",
            f"b's rule: its flood p99 <= max({RULE_FACTOR:g} x its baseline p99, baseline + "
            f"{RULE_SLACK_MS:g} ms); a's reserve use is tepat_critical_reserve_used_total"
            '{app="a"} read from the consumer\'s /metrics',
        ],
    )
