"""A request's id on its log lines, the access line included, and on its response
(api/request_id.py); the access line of a request that created a message names it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx

from tests.ops.support import child_env, free_port, tepat, wait_http
from tests.support.waiting import eventually

KEY = "ops-request-ids-admin-key-0123456789abcdef"


async def test_the_access_line_carries_the_request_id_and_the_message_it_created(
    tmp_path: Path,
) -> None:
    port = free_port()
    env = child_env(
        {
            "TEPAT_DATABASE_URL": f"sqlite:///{tmp_path}/t.db",
            "TEPAT_ADMIN_API_KEY": KEY,
            "TEPAT_METRICS_PORT": "0",
            "TEPAT_LOG_JSON": "true",
        }
    )
    base = f"http://127.0.0.1:{port}"
    with tepat("serve", ["serve", "--port", str(port)], env, tmp_path) as api:
        await wait_http(api, f"{base}/healthz")
        async with httpx.AsyncClient(base_url=base, headers={"X-API-Key": KEY}) as client:
            put = await client.put("/v1/users/ana", json={"timezone": "Asia/Jakarta"})
            assert put.status_code == 201, put.text
            generated = put.headers["X-Request-ID"]
            assert len(generated) == 32
            posted = await client.post(
                "/v1/users/ana/notifications",
                json={"idempotency_key": "k1", "category": "custom", "title": "Hi", "body": "x"},
                headers={"X-Request-ID": "trace-me-42"},
            )
            assert posted.status_code == 201, posted.text
            assert posted.headers["X-Request-ID"] == "trace-me-42"
            message_id = posted.json()["id"]
            # Not a plausible id (too long): replaced, never echoed into logs or headers.
            odd = await client.get("/v1/users/ana", headers={"X-Request-ID": "x" * 65})
            assert odd.headers["X-Request-ID"] != "x" * 65

        def access_lines() -> list[dict[str, Any]]:
            lines = [json.loads(line) for line in api.stderr().splitlines() if line.startswith("{")]
            return [e for e in lines if e.get("logger") == "uvicorn.access"]

        async def logged() -> bool:
            return any(e.get("request_id") == "trace-me-42" for e in access_lines())

        await eventually(logged, what="the one-off's access line")
        [line] = [e for e in access_lines() if e.get("request_id") == "trace-me-42"]
        assert line["message_id"] == message_id and line["user_id"] == "ana", line
        assert line["channel"] == "push", line
        assert line["method"] == "POST" and line["status"] == 201, line
        assert any(e.get("request_id") == generated for e in access_lines())
