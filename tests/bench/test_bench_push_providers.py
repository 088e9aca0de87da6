"""``bench dispatch`` and ``bench lateness --provider fcm|apns`` at a tiny size: the devices
are of that kind, the provider's own sandbox process receives every notification once, and
the result says which provider it measured. Speed is not asserted (the bench reports it)."""

from __future__ import annotations

import os

import pytest

from tests.bench.running import STOMP_URL_ENV, backends, bench_result

SIZES = {
    "dispatch": ("--messages", "200"),
    "lateness": ("--rate", "20", "--seconds", "3"),
}


@pytest.mark.parametrize("backend", backends())
@pytest.mark.parametrize("scenario", sorted(SIZES))
@pytest.mark.parametrize("provider", ["fcm", "apns"])
def test_each_notification_reaches_the_providers_sandbox_once(
    provider: str, scenario: str, backend: str
) -> None:
    argv = ["bench", scenario, "--provider", provider, "--backend", backend, "--json"]
    if backend == "activemq":
        argv += ["--stomp-url", os.environ[STOMP_URL_ENV], "--consumers", "1"]
    result = bench_result(*argv, *SIZES[scenario], timeout=300)
    assert result["parameters"]["provider"] == provider
    c = result["correctness"]
    assert c["expected"] > 0
    assert (c["sent"], c["duplicates"], c["lost"]) == (c["expected"], 0, 0), c
    assert c["tokens_received_twice"] == 0, c
    assert all(result["checks"].values()), result["checks"]
    runs = [v for v in result["figures"].values() if isinstance(v, dict)]
    # one send request a notification: FCM and APNs take one each
    assert sum(r["sandbox_send_requests"] for r in runs) == c["expected"]
