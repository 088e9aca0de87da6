"""Issue 11 defects 3 and 4 on the split deployment: real `tepat api`, `scheduler` and
`consumers` processes on a real ActiveMQ, the Expo sandbox as its own process.

A send is counted where it happens, in the consumer process, on its metrics port; the
store/broker gauges come from the scheduler's background refresh; the metrics page lists the
families exactly as exported; every process's stderr is JSON lines only.

Skipped unless ``TEPAT_TEST_STOMP_URL`` names a broker (``scripts/test.sh`` starts one):
with the embedded broker each process would have its own queue. Queue names are unique
per run, so a shared broker is fine.
"""

from __future__ import annotations

import uuid
from contextlib import ExitStack
from pathlib import Path

import httpx
import pytest

from tests.ops.support import (
    Exposition,
    assert_metrics_page_lists_exactly,
    categories_on_queues,
    child_env,
    free_port,
    json_lines,
    scrape,
    stomp_url,
    tepat,
    wait_http,
)
from tests.support.waiting import eventually

pytestmark = pytest.mark.activemq
KEY = "ops-split-admin-key-0123456789abcdef"
OK_TOKEN = "ExponentPushToken[ops-split-ok]"
DEAD_TOKEN = "ExponentPushToken[ops-split-dead]"


async def test_consumer_process_counts_its_sends_on_its_metrics_port(tmp_path: Path) -> None:
    broker = stomp_url()
    prefix = f"ops{uuid.uuid4().hex[:8]}"
    sandbox_port, api_port = free_port(), free_port()
    scheduler_metrics, consumer_metrics = free_port(), free_port()
    env = child_env(
        {
            "TEPAT_DATABASE_URL": f"sqlite:///{tmp_path}/tepat.db",
            "TEPAT_BROKER_URL": broker,
            "TEPAT_EXPO_URL": f"http://127.0.0.1:{sandbox_port}",
            "TEPAT_ADMIN_API_KEY": KEY,
            "TEPAT_CATEGORIES": categories_on_queues(prefix),
            "TEPAT_RECEIPT_DELAY_SECONDS": "3600",
            "TEPAT_METRICS_REFRESH_SECONDS": "0.2",
            # Every library (stomp.py frames, httpcore, asyncio) has its say: all JSON.
            "TEPAT_LOG_LEVEL": "DEBUG",
        }
    )
    sandbox_url = f"http://127.0.0.1:{sandbox_port}"
    api = f"http://127.0.0.1:{api_port}"
    with ExitStack() as stack:
        sandbox = stack.enter_context(
            tepat("sandbox", ["sandbox", "expo", "--port", str(sandbox_port)], env, tmp_path)
        )
        await wait_http(sandbox, f"{sandbox_url}/_sandbox/stats")
        # The consumer first, so the API's store migration is not racing two others.
        consumers = stack.enter_context(
            tepat(
                "consumers",
                ["consumers", "--metrics-port", str(consumer_metrics)],
                env,
                tmp_path,
            )
        )
        await wait_http(consumers, f"http://127.0.0.1:{consumer_metrics}/healthz")
        scheduler = stack.enter_context(
            tepat(
                "scheduler",
                ["scheduler", "--metrics-port", str(scheduler_metrics)],
                env,
                tmp_path,
            )
        )
        api_proc = stack.enter_context(
            tepat("api", ["api", "--port", str(api_port)], env, tmp_path)
        )
        await wait_http(scheduler, f"http://127.0.0.1:{scheduler_metrics}/healthz")
        await wait_http(api_proc, f"{api}/readyz")

        async with httpx.AsyncClient(base_url=api, headers={"X-API-Key": KEY}) as client:
            r = await client.post(
                f"{sandbox_url}/_sandbox/script",
                json={"tokens": {DEAD_TOKEN: {"ticket_error": "DeviceNotRegistered"}}},
            )
            assert r.status_code == 200, r.text
            for user, token in (("ok", OK_TOKEN), ("dead", DEAD_TOKEN)):
                r = await client.put(f"/v1/users/{user}", json={"timezone": "UTC"})
                assert r.is_success, r.text
                r = await client.put(f"/v1/users/{user}/devices/d", json={"push_token": token})
                assert r.is_success, r.text
                r = await client.post(
                    f"/v1/users/{user}/notifications",
                    json={"idempotency_key": "k", "category": "custom", "title": "t", "body": "b"},
                )
                assert r.status_code == 201, r.text

        consumer_url = f"http://127.0.0.1:{consumer_metrics}/metrics"
        sent: Exposition | None = None

        async def counted() -> bool:
            nonlocal sent
            sent = await scrape(consumer_url)
            return (
                sent.value("tepat_send_lateness_seconds_count", category="custom") == 1
                and sent.value("tepat_provider_errors_total", code="DeviceNotRegistered") == 1
            )

        await eventually(counted, timeout=60, what="the consumer to count both sends")
        assert sent is not None
        assert (sent.value("tepat_send_latency_seconds_count") or 0) >= 1
        assert (sent.value("process_resident_memory_bytes") or 0) > 0
        assert sent.value("python_info") == 1
        assert_metrics_page_lists_exactly(sent)

        # The shared figures come from the scheduler's refresh, cached between scrapes.
        scheduler_url = f"http://127.0.0.1:{scheduler_metrics}/metrics"

        async def refreshed() -> bool:
            exp = await scrape(scheduler_url)
            return (
                exp.value("tepat_messages", status="sent", category="custom", channel="push") == 1
                and exp.value("tepat_messages", status="failed", category="custom", channel="push")
                == 1
                and exp.value("tepat_queue_depth", queue=f"{prefix}.custom", state="ready")
                is not None
            )

        await eventually(refreshed, timeout=30, what="the scheduler's gauges")
        # An API replica computes none of them (a scrape there costs no I/O).
        api_exp = await scrape(f"{api}/metrics")
        assert api_exp.value("tepat_messages") is None
        assert api_exp.value("tepat_gauges_last_refresh_timestamp_seconds") is None
        assert_metrics_page_lists_exactly(api_exp)

        for proc in (api_proc, scheduler, consumers):
            assert proc.stop() == 0, proc.stderr()[-3000:]
        # uvicorn.run re-raises the SIGTERM it handled once it has shut down.
        assert sandbox.stop() in (0, -15), sandbox.stderr()[-3000:]
        procs = [sandbox, consumers, scheduler, api_proc]

    loggers: set[str] = set()
    for proc in procs:
        loggers |= {e["logger"] for e in json_lines(proc) if "logger" in e}
    assert {"uvicorn.error", "uvicorn.access", "tepat.runtime", "stomp.py"} <= loggers, loggers
    # Access lines carry their parts; the probes and scrapes above are not among them.
    access = [e for e in json_lines(api_proc) if e.get("logger") == "uvicorn.access"]
    assert {"method": "PUT", "path": "/v1/users/ok", "status": 201}.items() <= access[0].items()
    assert not [e for e in access if e["path"] in ("/readyz", "/healthz", "/metrics")]
