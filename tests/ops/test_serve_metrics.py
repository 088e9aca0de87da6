"""`tepat serve --sandbox` (embedded broker, always runs): sends counted and gauges refreshed
in the background, both on its HTTP port's /metrics; the documented list; JSON-only stderr."""

from __future__ import annotations

from pathlib import Path

import httpx

from tests.ops.support import (
    Exposition,
    assert_metrics_page_lists_exactly,
    child_env,
    free_port,
    json_lines,
    scrape,
    tepat,
    wait_http,
)
from tests.support.waiting import eventually

KEY = "ops-serve-admin-key-0123456789abcdef"


async def test_serve_counts_sends_and_serves_cached_gauges(tmp_path: Path) -> None:
    port, sandbox_port = free_port(), free_port()
    env = child_env(
        {
            "TEPAT_DATABASE_URL": f"sqlite:///{tmp_path}/tepat.db",
            "TEPAT_ADMIN_API_KEY": KEY,
            "TEPAT_METRICS_REFRESH_SECONDS": "0.2",
            "TEPAT_LOG_LEVEL": "DEBUG",
            "TEPAT_ACCESS_LOG_LEVEL": "DEBUG",  # probes too: still JSON, and at DEBUG
        }
    )
    base = f"http://127.0.0.1:{port}"
    argv = ["serve", "--sandbox", "--port", str(port), "--sandbox-port", str(sandbox_port)]
    with tepat("serve", argv, env, tmp_path) as proc:
        await wait_http(proc, f"{base}/readyz")
        async with httpx.AsyncClient(base_url=base, headers={"X-API-Key": KEY}) as client:
            r = await client.put("/v1/users/ana", json={"timezone": "Europe/London"})
            assert r.is_success, r.text
            r = await client.put(
                "/v1/users/ana/devices/phone", json={"push_token": "ExponentPushToken[ops-ana]"}
            )
            assert r.is_success, r.text
            r = await client.post(
                "/v1/users/ana/notifications",
                json={"idempotency_key": "k", "category": "meal", "title": "t", "body": "b"},
            )
            assert r.status_code == 201, r.text

        exp: Exposition | None = None

        async def sent_and_refreshed() -> bool:
            nonlocal exp
            exp = await scrape(f"{base}/metrics")
            return (
                exp.value("tepat_send_lateness_seconds_count", category="meal") == 1
                and exp.value("tepat_messages", status="sent", category="meal", channel="push") == 1
                and exp.value("tepat_sends_total", channel="push", provider="expo", outcome="sent")
                == 1
            )

        await eventually(sent_and_refreshed, timeout=60, what="the send, counted and refreshed")
        assert exp is not None
        # Zeros are series too, so rate() and alerts see them before the first event.
        assert exp.value("tepat_messages", status="failed", category="safety") == 0
        assert exp.value("tepat_queue_depth", queue="tepat.meal", state="ready") is not None
        assert exp.value("tepat_oldest_due_unsent_seconds") == 0
        assert (exp.value("tepat_gauges_last_refresh_timestamp_seconds", source="store") or 0) > 0
        assert (exp.value("process_cpu_seconds_total") or 0) > 0
        assert not [n for n, _, _ in exp.samples if n.endswith("_created")]
        assert_metrics_page_lists_exactly(exp)
        assert proc.stop() == 0, proc.stderr()[-3000:]

    events = json_lines(proc)
    probes = [e for e in events if e.get("path") in ("/readyz", "/metrics")]
    assert probes and {e["level"] for e in probes} == {"debug"}
    calls = [e for e in events if e.get("logger") == "uvicorn.access" and e not in probes]
    assert calls and {e["level"] for e in calls} == {"info"}
