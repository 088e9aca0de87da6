"""bench/chaos_failover.py: a copy FCM accepted counts as a copy, and a message sent both
ways is a window duplicate only where its first answer was ambiguous and its category
retries such answers (failed over), a duplicate outside it otherwise."""

from __future__ import annotations

from bench.chaos_failover import as_expo_copies, fcm_token
from bench.chaos_tally import tally
from tepat.domain.categories import Categories
from tests.bench.test_chaos_tally import AT, Store, copy, sent


def via_fcm(mid: str, name: str) -> dict[str, object]:
    message = {"token": "fcm-bench-1", "data": {"tepat_message_id": mid}}
    return {"name": name, "message": message, "at": AT.isoformat()}


def test_copies_through_fcm_are_counted_with_expos() -> None:
    store = Store({"a": sent("f1"), "s": sent("f2"), "m": sent("f3")}, {"f1", "f2", "f3"})
    received = [
        *as_expo_copies([via_fcm("a", "f1"), via_fcm("s", "f2"), via_fcm("m", "f3")]),
        copy("s", "t1", -1),  # Expo accepted, the answer was lost: safety failed over
        copy("m", "t2", -1),  # the same for meal, which closes such answers: a failure
    ]
    counted = tally(store, {"a": "meal", "s": "safety", "m": "meal"}, received, Categories())
    assert (counted.lost, counted.window_duplicates, counted.duplicates) == (0, 1, 1)


def test_one_device_in_ten_has_no_fallback() -> None:
    assert sum(fcm_token(i) is None for i in range(100)) == 10
