"""The measures the ratelimited and burst scenarios compute, on hand-made inputs."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from bench.arrivals import Arrivals
from bench.burst import figures_of
from bench.burst_api import local_hhmm, zone_fits, zones_for

T = datetime(2027, 3, 14, 12, 0, tzinfo=UTC)


def _received(*requests: tuple[float, int]) -> list[dict[str, Any]]:
    """One ok entry per notification, stamped like the sandbox (one stamp per request)."""
    out = []
    for offset, n in requests:
        at = (T + timedelta(seconds=offset)).isoformat()
        out += [{"status": "ok", "received_at": at}] * n
    return out


def test_the_worst_second_is_found_wherever_it_starts() -> None:
    # 150 every 0.25 s = 600/s; the request of 1.25 s arrives 50 ms late, so the five
    # from it to 2.25 s fall within 0.95 s, across a whole-second boundary
    stamps = [i * 0.25 for i in range(40)]
    stamps[5] += 0.05
    a = Arrivals.of(_received(*((s, 150) for s in stamps)))
    assert a.total == 6000
    assert a.max_in_window(1.0) == 750
    assert max(a.per_second().values()) == 600


def test_an_exact_rate_never_exceeds_it_in_half_open_windows() -> None:
    a = Arrivals.of(_received(*((i * 0.25, 150) for i in range(40))))
    assert a.max_in_window(1.0) == 600
    assert a.max_in_window(5.0) == 3000
    assert a.steady_rate() == 600


def test_refused_notifications_are_not_counted() -> None:
    received = [*_received((0.0, 100)), {"status": "error", "received_at": T.isoformat()}]
    assert Arrivals.of(received).total == 100


def test_every_picked_zone_names_the_same_instant_at_its_local_time() -> None:
    zones = zones_for(T, 700)
    assert len(set(zones)) > 300  # spread over the world, not all UTC
    for zone in set(zones):
        assert zone_fits(T, zone)
        local = datetime.strptime(local_hhmm(T, zone), "%H:%M").time()
        assert T.astimezone(ZoneInfo(zone)).time() == local


def test_a_zone_in_its_dst_fold_does_not_fit() -> None:
    # 2027-11-07 01:30 happens twice in New York; the second one (06:30 UTC) is not
    # what a reminder at local 01:30 means
    second = datetime(2027, 11, 7, 6, 30, tzinfo=UTC)
    assert not zone_fits(second, "America/New_York")
    assert zone_fits(second - timedelta(hours=1), "America/New_York")


def test_burst_figures_order_drain_and_requests() -> None:
    category_of = {"s1": "safety", "s2": "safety", "m1": "meal", "m2": "meal"}
    arrivals = {
        "s1": T + timedelta(seconds=0.1),
        "s2": T + timedelta(seconds=0.2),
        "m1": T + timedelta(seconds=0.3),
        "m2": T + timedelta(seconds=0.5),
    }
    figures, goals = figures_of(category_of, arrivals, T, {"send_requests": 1})
    assert figures["drain_seconds"] == 0.5
    assert figures["fewest_requests"] == 1
    assert figures["drained_order"] == ["safety", "meal"]
    assert goals["safety_done_before_meal_starts"]
    assert goals["requests<=1.1x_K/100"]
    late_safety = {**arrivals, "s2": T + timedelta(seconds=0.4)}
    _, goals = figures_of(category_of, late_safety, T, {"send_requests": 2})
    assert not goals["safety_done_before_meal_starts"]
    assert not goals["requests<=1.1x_K/100"]


def test_a_provider_at_the_rate_refuses_a_pair_at_twice_it_not_one_at_it() -> None:
    at_rate = Arrivals.of(_received(*((i * 0.25, 150) for i in range(40))))
    assert at_rate.refused_by_bucket(600, 600) == 0
    # a lull refills the provider's bucket too: 800 in the second after it pass
    after_lull = Arrivals.of(_received(*((2 + i * 0.125, 100) for i in range(8))))
    assert after_lull.max_in_window(1.0) == 800
    assert after_lull.refused_by_bucket(600, 600) == 0
    twice = Arrivals.of(_received(*((i * 0.125, 150) for i in range(40))))
    assert twice.refused_by_bucket(600, 600) > 0


def test_a_burst_not_fully_arrived_has_no_drain_and_meets_no_goal() -> None:
    category_of = {"s1": "safety", "m1": "meal"}
    figures, goals = figures_of(category_of, {"s1": T}, T, {"send_requests": 1})
    assert figures["arrived"] == 1
    assert figures["drain_seconds"] is None
    assert not any(v for k, v in goals.items() if k != "zero_429s")
