"""The burst scenario (see ``bench/README.md``): K notifications due at one instant, at
Expo's 600/s, twice.

* **bulk**: K one-offs inserted through the Store API (a bulk plan), published in full
  batches;
* **api**: K users, devices and daily reminders created through the HTTP API, one PUT
  each, as apps do (bench/burst_api.py), the reminders falling at one instant in each
  user's zone.

Both must drain in about K / 600 seconds, in about K / 100 Expo requests, with every
``safety`` notification out before the first ``meal``.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from datetime import datetime
from pathlib import Path
from typing import Any

from bench.burst_api import ApiBurst, run_api_burst
from bench.delivery import Plan, categories_round_robin, deliver
from bench.report import Correctness, Result, log
from bench.scenarios import _checks, _merge, _seconds

EXPO_LIMIT = 600.0
DRAIN_GOAL = 1.05  # x ideal
REQUESTS_GOAL = 1.1  # x K/100


def _first_arrivals(received: list[dict[str, Any]]) -> tuple[dict[str, datetime], Counter[str]]:
    """First ok arrival per message id, and how many ok copies of each arrived."""
    arrivals: dict[str, datetime] = {}
    copies: Counter[str] = Counter()
    for r in received:
        if r.get("status") != "ok":
            continue
        mid = str((r.get("data") or {}).get("tepat_message_id", ""))
        copies[mid] += 1
        at = datetime.fromisoformat(str(r["received_at"]))
        if mid not in arrivals or at < arrivals[mid]:
            arrivals[mid] = at
    return arrivals, copies


def figures_of(
    category_of: dict[str, str],
    arrivals: dict[str, datetime],
    due: datetime,
    sandbox_stats: dict[str, int],
) -> tuple[dict[str, Any], dict[str, bool]]:
    """Drain, order of categories and requests for K messages due at ``due``."""
    k = len(category_of)
    ideal = k / EXPO_LIMIT
    arrived = [arrivals[m] for m in category_of if m in arrivals]
    # Not drained until every message arrived: a partial drain has no drain time.
    drain = _seconds(max(arrived), due) if arrived and len(arrived) == k else math.inf
    spans: dict[str, list[float]] = defaultdict(list)
    for mid, category in category_of.items():
        if mid in arrivals:
            spans[category].append(_seconds(arrivals[mid], due))
    order = sorted(spans, key=lambda c: max(spans[c]))
    per_category = {
        c: {"first_s": round(min(v), 2), "last_s": round(max(v), 2), "count": len(v)}
        for c, v in sorted(spans.items(), key=lambda kv: max(kv[1]))
    }
    safety_last = max(spans.get("safety", [math.nan]))
    meal_first = min(spans.get("meal", [math.nan]))
    refused = sandbox_stats.get("too_many_requests", 0)
    requests = sandbox_stats.get("send_requests", 0) + refused
    fewest = math.ceil(k / 100)
    figures = {
        "messages": k,
        "arrived": len(arrived),
        "drain_seconds": round(drain, 2) if math.isfinite(drain) else None,
        "ideal_seconds": round(ideal, 2),
        "drain_over_ideal": round(drain / ideal, 3) if ideal and math.isfinite(drain) else None,
        "expo_requests": requests,
        "fewest_requests": fewest,
        "requests_over_fewest": round(requests / fewest, 3) if fewest else None,
        "notifications_per_request": round(k / requests, 1) if requests else None,
        "safety_last_s": round(safety_last, 2),
        "meal_first_s": round(meal_first, 2),
        "drained_order": order,
        "per_category": per_category,
        "responses_429": refused,
    }
    goals = {
        f"drain<={DRAIN_GOAL}x_ideal": drain <= DRAIN_GOAL * ideal,
        f"requests<={REQUESTS_GOAL}x_K/100": math.isfinite(drain)
        and requests <= REQUESTS_GOAL * fewest,
        "safety_done_before_meal_starts": math.isfinite(drain) and safety_last <= meal_first,
        "zero_429s": refused == 0,
    }
    return figures, goals


def _api_correctness(api: ApiBurst, count: int) -> Correctness:
    arrivals, copies = _first_arrivals(api.received)
    due = api.category_of
    tokens: Counter[str] = Counter(
        str(r.get("to")) for r in api.received if r.get("status") == "ok"
    )
    strangers = sum(n for mid, n in copies.items() if mid not in due)
    return Correctness(
        expected=count,
        sent=sum(1 for m in due if m in arrivals),
        duplicates=sum(n - 1 for m, n in copies.items() if m in due and n > 1) + strangers,
        lost=count - sum(1 for m in due if m in arrivals),
        details={
            "statuses": api.statuses,
            "messages_due_at_T": len(due),
            "tokens_received_twice": sum(1 for n in tokens.values() if n > 1),
            "process_exit_codes": [e.returncode for e in api.consumers],
        },
    )


def run_burst(workdir: Path, backend: str, broker_url: str, prefix: str, messages: int) -> Result:
    log(f"burst (bulk): {messages} messages due at one instant, sandbox at {EXPO_LIMIT:g}/s")
    o = deliver(
        workdir / "burst",
        broker_url,
        prefix,
        Plan(
            items=[(0.0, c) for c in categories_round_robin(messages)],
            sandbox_rate_limit=EXPO_LIMIT,
        ),
    )
    bulk, bulk_goals = figures_of(
        {mid: d.category for mid, d in o.due.items()}, o.arrivals, o.t0, o.sandbox_stats
    )
    bulk["ready_margin_s"] = o.ready_margin_s
    bulk["consumer_peak_rss_mb"] = o.peak_rss_mb

    log(f"burst (api): {messages} users, devices and reminders through the HTTP API")
    api = run_api_burst(workdir / "burst-api", broker_url, prefix + "api.", messages, EXPO_LIMIT)
    arrivals, _ = _first_arrivals(api.received)
    api_figures, api_goals = figures_of(api.category_of, arrivals, api.at, api.sandbox_stats)
    api_figures["registration"] = api.register
    api_figures["zones"] = api.zones
    api_figures["api_peak_rss_mb"] = max((e.peak_rss_mb for e in api.consumers), default=0.0)
    api_correct = _api_correctness(api, messages)

    bulk_ratio = bulk["drain_over_ideal"] or math.inf
    api_ratio = api_figures["drain_over_ideal"] or math.inf
    goals = {
        **{f"bulk:{k}": v for k, v in bulk_goals.items()},
        **{f"api:{k}": v for k, v in api_goals.items()},
        # "the drain must be the same": within the drain goal's own 5 % of each other
        "api:drain_same_as_bulk": api_ratio <= bulk_ratio + (DRAIN_GOAL - 1),
    }
    correctness = _merge([o])
    total = Correctness(
        expected=correctness.expected + api_correct.expected,
        sent=correctness.sent + api_correct.sent,
        duplicates=correctness.duplicates + api_correct.duplicates,
        lost=correctness.lost + api_correct.lost,
        details={
            "tokens_received_twice": correctness.details.get("tokens_received_twice", 0)
            + api_correct.details["tokens_received_twice"],
            "bulk": correctness.as_dict(),
            "api": api_correct.as_dict(),
        },
    )
    return Result(
        scenario="burst",
        backend=backend,
        parameters={"messages": messages, "limit_per_second": EXPO_LIMIT, "categories": 7},
        figures={"bulk": bulk, "api": api_figures},
        goals=goals,
        correctness=total,
        checks={
            **_checks(o),
            "api_processes_exited_cleanly": all(e.returncode == 0 for e in api.consumers),
        },
        notes=[
            "drain = last arrival at the sandbox - the shared due instant; ideal = K / 600; "
            "Expo requests = every send request the sandbox answered (accepted + 429), "
            "against ceil(K / 100)",
            "api: users over many zones, each reminder's local HH:MM chosen so that all fall "
            "at one instant T; one PUT per user, device and reminder with "
            f"{api.register.get('clients')} concurrent HTTP clients",
        ],
    )
