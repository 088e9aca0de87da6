"""The ratelimited scenario (see ``bench/README.md``): a provider limit that finds itself,
and a ceiling shared by consumer processes.

Two runs, each with K one-offs due at one instant:

* **provider-limited**: the sandbox accepts ``--provider-limit`` notifications/s (Expo's
  sandbox project: 100/s) and answers 429 beyond, while Tepat is configured at the full
  ceiling (``TEPAT_EXPO_RATE_LIMIT`` = 600). One consumer process has to find the real
  limit: few 429s, a drain close to K / limit.
* **mixed flood**: other traffic due at 5x the ceiling (a provider enforcing 100/s, Tepat
  configured at 100/s) with ``safety`` messages due at 2/s throughout, once with
  ``TEPAT_CRITICAL_RESERVE=0.2`` and once without: the safety messages' lateness against
  the flood's.
* **shared ceiling** (ActiveMQ only): two consumer processes, ceiling 600, a sandbox that
  would take more (1.5 x the ceiling). Together they must send at the ceiling, never
  above it, with no 429: each takes ``ceiling / live consumers`` (consumers/rate_share.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench.arrivals import Arrivals
from bench.delivery import Outcome, Plan, categories_round_robin, deliver, percentile
from bench.report import Result, log
from bench.scenarios import _checks, _merge, _seconds

CEILING = 600.0  # TEPAT_EXPO_RATE_LIMIT, Expo's documented per-project limit
DEFAULT_PROVIDER_LIMIT = 100.0  # what Expo's sandbox project enforces
SHARED_CONSUMERS = 2
# The sandbox in the shared run: above the ceiling, so a pair that ignored the share
# (each at 600) would collect 429s, and the per-second counts show any excess.
SHARED_SANDBOX_FACTOR = 1.5
# Shared run size relative to the provider-limited run (it goes 6x faster).
SHARED_SIZE_FACTOR = 3
# The tolerance on the worst 1 s window: one request (100 notifications, Expo's most per
# request) per consumer process. Each process's token bucket holds one request, so that a
# request can go at once after a pause; after a lull (ActiveMQ's scheduler fires in
# bursts) N processes can each release that one request on top of the steady rate. So
# ceiling + N x 100 is the bound the design promises; above it the share is wrong.
REQUEST = 100
# The mixed flood: a provider (and Tepat's ceiling) at MIXED_CEILING, other traffic due at
# FLOOD_FACTOR x it, safety messages at CRITICAL_PER_SECOND until the flood has drained.
MIXED_CEILING = 100.0
FLOOD_FACTOR = 5
CRITICAL_PER_SECOND = 2
RESERVE = 0.2


def _sandbox(o: Outcome) -> dict[str, int]:
    s = o.sandbox_stats
    accepted = s.get("send_requests", 0)
    refused = s.get("too_many_requests", 0)
    return {"send_requests": accepted + refused, "accepted": accepted, "429": refused}


def _drain(o: Outcome) -> float:
    last = max(o.arrivals.values(), default=o.start)
    return _seconds(last, o.start)


def provider_limited(
    workdir: Path, broker_url: str, prefix: str, messages: int, provider_limit: float
) -> tuple[dict[str, Any], dict[str, bool], Outcome]:
    log(
        f"ratelimited: {messages} due at once, sandbox at {provider_limit:g}/s, "
        f"Tepat configured at {CEILING:g}/s, 1 consumer process"
    )
    o = deliver(
        workdir / "provider-limited",
        broker_url,
        prefix + "pl.",
        Plan(
            items=[(0.0, c) for c in categories_round_robin(messages)],
            sandbox_rate_limit=provider_limit,
            client_rate_limit=CEILING,
        ),
    )
    s = _sandbox(o)
    ideal = messages / provider_limit
    drain = _drain(o)
    share_429 = s["429"] / max(1, s["send_requests"])
    arrivals = Arrivals.of(o.received)
    figures = {
        "messages": messages,
        "provider_limit_per_second": provider_limit,
        "ceiling_per_second": CEILING,
        "drain_seconds": round(drain, 2),
        "ideal_seconds": round(ideal, 2),
        "drain_over_ideal": round(drain / ideal, 3),
        "accepted_per_second": round(messages / drain, 1) if drain > 0 else None,
        "send_requests": s["send_requests"],
        "responses_429": s["429"],
        "share_429_of_send_requests": round(share_429, 4),
        "max_accepted_in_1s_window": arrivals.max_in_window(),
        "per_second_counts": list(arrivals.per_second().values()),
        "consumer_peak_rss_mb": o.peak_rss_mb,
        "ready_margin_s": o.ready_margin_s,
    }
    goals = {
        "429s<=5%_of_sends": share_429 <= 0.05,
        "drain<=1.2x_ideal": drain <= 1.2 * ideal,
    }
    return figures, goals, o


def shared_ceiling(
    workdir: Path, broker_url: str, prefix: str, messages: int
) -> tuple[dict[str, Any], dict[str, bool], Outcome]:
    sandbox_limit = CEILING * SHARED_SANDBOX_FACTOR
    log(
        f"ratelimited: {messages} due at once, {SHARED_CONSUMERS} consumer processes sharing "
        f"a ceiling of {CEILING:g}/s, sandbox at {sandbox_limit:g}/s"
    )
    o = deliver(
        workdir / "shared-ceiling",
        broker_url,
        prefix + "sc.",
        Plan(
            items=[(0.0, c) for c in categories_round_robin(messages)],
            consumers=SHARED_CONSUMERS,
            sandbox_rate_limit=sandbox_limit,
            client_rate_limit=CEILING,
        ),
    )
    s = _sandbox(o)
    arrivals = Arrivals.of(o.received)
    drain = _drain(o)
    rate = messages / drain if drain > 0 else 0.0
    steady = arrivals.steady_rate()
    worst = arrivals.max_in_window(1.0)
    tolerance = REQUEST * SHARED_CONSUMERS
    per_second = arrivals.per_second()
    # The strict reading: a provider enforcing exactly the ceiling, its bucket holding one
    # second (as the sandbox's does), fed these arrivals as they came.
    would_refuse = arrivals.refused_by_bucket(CEILING, CEILING)
    figures = {
        "messages": messages,
        "consumer_processes": SHARED_CONSUMERS,
        "ceiling_per_second": CEILING,
        "sandbox_limit_per_second": sandbox_limit,
        "drain_seconds": round(drain, 2),
        "combined_per_second": round(rate, 1),
        "combined_over_ceiling": round(rate / CEILING, 3),
        "steady_per_second": round(steady, 1) if steady is not None else None,
        "max_accepted_in_1s_window": worst,
        "max_accepted_in_whole_second": max(per_second.values(), default=0),
        "max_per_second_over_5s_window": round(arrivals.max_in_window(5.0) / 5, 1),
        "window_tolerance": tolerance,
        "requests_a_ceiling_provider_would_refuse": would_refuse,
        "per_second_counts": list(per_second.values()),
        "send_requests": s["send_requests"],
        "responses_429": s["429"],
        "consumer_peak_rss_mb": o.peak_rss_mb,
        "ready_margin_s": o.ready_margin_s,
    }
    goals = {
        "combined>=95%_of_ceiling": rate >= 0.95 * CEILING,
        "max_1s_window<=ceiling+tolerance": worst <= CEILING + tolerance,
        "a_provider_at_the_ceiling_refuses_nothing": would_refuse == 0,
        "zero_429s": s["429"] == 0,
    }
    return figures, goals, o


def mixed_flood(
    workdir: Path, broker_url: str, prefix: str, messages: int, reserve: float
) -> tuple[dict[str, Any], Outcome]:
    per_second = round(FLOOD_FACTOR * MIXED_CEILING)
    # Safety messages keep coming until the flood has drained at the rest of the rate.
    drain = messages / ((1 - reserve) * MIXED_CEILING)
    bulk = [c for c in categories_round_robin(messages * 2) if c != "safety"][:messages]
    # Due at whole seconds, as a campaign or the day's reminders are: a batch per category
    # and second, so a consumer's batches in hand are not all the flood's.
    items = [(float(i // per_second), c) for i, c in enumerate(bulk)]
    items += [(k / CRITICAL_PER_SECOND, "safety") for k in range(int(drain * CRITICAL_PER_SECOND))]
    log(
        f"ratelimited: mixed flood, {messages} due at {FLOOD_FACTOR}x a ceiling of "
        f"{MIXED_CEILING:g}/s, safety at {CRITICAL_PER_SECOND}/s, reserve {reserve:g}"
    )
    o = deliver(
        workdir / f"mixed-flood-{reserve:g}",
        broker_url,
        prefix + f"mf{round(reserve * 100)}.",
        Plan(
            items=items,
            sandbox_rate_limit=MIXED_CEILING,
            client_rate_limit=MIXED_CEILING,
            env=(("TEPAT_CRITICAL_RESERVE", str(reserve)),),
        ),
    )
    late: dict[bool, list[float]] = {True: [], False: []}
    for mid, d in o.due.items():
        if mid in o.arrivals:
            late[d.category == "safety"].append(_seconds(o.arrivals[mid], d.scheduled_at))
    s = _sandbox(o)
    figures = {
        "reserve": reserve,
        "other_messages": messages,
        "safety_messages": len(items) - messages,
        "safety_lateness_s_p50": round(percentile(late[True], 50), 3),
        "safety_lateness_s_p99": round(percentile(late[True], 99), 3),
        "other_lateness_s_p50": round(percentile(late[False], 50), 2),
        "other_lateness_s_p99": round(percentile(late[False], 99), 2),
        "drain_seconds": round(_drain(o), 2),
        "max_accepted_in_1s_window": Arrivals.of(o.received).max_in_window(),
        "responses_429": s["429"],
    }
    return figures, o


def run_ratelimited(
    workdir: Path,
    backend: str,
    broker_url: str,
    prefix: str,
    messages: int,
    provider_limit: float = DEFAULT_PROVIDER_LIMIT,
) -> Result:
    one_fig, one_goals, one = provider_limited(
        workdir, broker_url, prefix, messages, provider_limit
    )
    outcomes = [one]
    figures: dict[str, Any] = {"provider_limited": one_fig}
    goals = {f"provider_limited:{k}": v for k, v in one_goals.items()}
    notes = [
        "provider-limited: drain = last arrival at the sandbox - the due instant; "
        "ideal = K / provider limit; 429s counted at the sandbox, as a share of every "
        "send request it answered (accepted + 429)",
    ]
    mixed_messages = min(messages, 3000)
    for reserve in (RESERVE, 0.0):
        mixed, o = mixed_flood(workdir, broker_url, prefix, mixed_messages, reserve)
        outcomes.append(o)
        figures[f"mixed_flood_reserve_{reserve:g}"] = mixed
    with_reserve = figures[f"mixed_flood_reserve_{RESERVE:g}"]
    without = figures["mixed_flood_reserve_0"]
    goals["mixed_flood:safety_p99_at_most_half_of_without_reserve"] = (
        with_reserve["safety_lateness_s_p99"] <= 0.5 * without["safety_lateness_s_p99"]
    )
    goals["mixed_flood:zero_429s_with_reserve"] = with_reserve["responses_429"] == 0
    notes.append(
        "mixed flood: lateness = arrival at the sandbox - scheduled instant, for the safety "
        "messages and for the others (every category but safety), with "
        f"TEPAT_CRITICAL_RESERVE={RESERVE:g} and with 0 (no reserve); the others are "
        "min(K, 3000)"
    )
    shared_messages = messages * SHARED_SIZE_FACTOR
    if backend == "embedded":
        figures["shared_ceiling"] = "not applicable"
        notes.append(
            "shared ceiling: not applicable on embedded (the broker lives inside one "
            "process, so a second consumer process cannot share its queues)"
        )
    else:
        two_fig, two_goals, two = shared_ceiling(workdir, broker_url, prefix, shared_messages)
        outcomes.append(two)
        figures["shared_ceiling"] = two_fig
        goals.update({f"shared_ceiling:{k}": v for k, v in two_goals.items()})
        notes.append(
            "shared ceiling: rates from the sandbox's own stamps of accepted notifications; "
            "combined = K / (last arrival - due instant); the worst 1 s is the maximum over "
            "every half-open 1 s window, allowed one request (100) per consumer process over "
            "the ceiling: each process's token bucket holds one request, which it may "
            "release on top of the steady rate after a lull; the strict check replays the "
            "arrivals through a provider bucket at exactly the ceiling (burst of one "
            "second, like the sandbox's)"
        )
    return Result(
        scenario="ratelimited",
        backend=backend,
        parameters={
            "messages": messages,
            "provider_limit_per_second": provider_limit,
            "ceiling_per_second": CEILING,
            "shared_messages": shared_messages if backend != "embedded" else None,
        },
        figures=figures,
        goals=goals,
        correctness=_merge(outcomes),
        checks={k: all(_checks(o)[k] for o in outcomes) for k in _checks(one)},
        notes=notes,
    )
