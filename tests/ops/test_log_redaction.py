"""No credential from a URL reaches the log: real requests to ``tepat serve``, its stderr
read back (issue 19, 8). A JWT given as ``?access_token=`` (however the name is spelled:
``access%5Ftoken`` decodes to it and opens the stream too), other secret query
parameters, and the token of an unsubscribe link ``/u/<token>``."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import jwt

from tests.ops.support import child_env, free_port, json_lines, tepat, wait_http

KEY = "ops-redaction-admin-key-0123456789abcdef"
JWT_SECRET = "ops-redaction-jwt-secret-0123456789abcdef"


def _jwt(user_id: str, marker: str) -> str:
    claims = {"sub": user_id, "exp": int(time.time()) + 3600, "jti": marker}
    return jwt.encode(claims, JWT_SECRET, algorithm="HS256")


async def test_tokens_in_urls_never_reach_the_log(tmp_path: Path) -> None:
    port = free_port()
    env = child_env(
        {
            "TEPAT_DATABASE_URL": f"sqlite:///{tmp_path}/tepat.db",
            "TEPAT_ADMIN_API_KEY": KEY,
            "TEPAT_JWT_SECRET": JWT_SECRET,
            "TEPAT_LOG_JSON": "true",
        }
    )
    base = f"http://127.0.0.1:{port}"
    encoded_name, plain_name = _jwt("ana", "first"), _jwt("ana", "second")
    unsubscribe = "eyJ1IjoiYW5hIn0.c2VjcmV0LXVuc3Vic2NyaWJlLXRva2Vu"
    with tepat("serve", ["serve", "--port", str(port)], env, tmp_path) as proc:
        await wait_http(proc, f"{base}/readyz")
        async with httpx.AsyncClient(base_url=base, timeout=10) as client:
            r = await client.put(
                "/v1/users/ana", json={"timezone": "UTC"}, headers={"X-API-Key": KEY}
            )
            assert r.is_success, r.text
            stream = "/v1/users/ana/inbox/stream"
            for query in (
                f"access%5Ftoken={encoded_name}",
                f"last_event_id=0&access_token={plain_name}",
            ):
                async with client.stream("GET", f"{stream}?{query}") as opened:
                    assert opened.status_code == 200  # the token worked: the stream is open
            await client.get(f"/u/{unsubscribe}")
            await client.post(f"/u/{unsubscribe}")
            await client.get("/v1/users/ana?api%5Fkey=query-api-key-value&Signature=sig-value")
        proc.stop()
    log = proc.stderr()
    for secret in (encoded_name, plain_name, unsubscribe, "query-api-key-value", "sig-value"):
        assert secret not in log
    paths = [e.get("path") for e in json_lines(proc) if e.get("logger") == "uvicorn.access"]
    assert f"{stream}?access%5Ftoken=REDACTED" in paths
    assert f"{stream}?last_event_id=0&access_token=REDACTED" in paths
    assert "/u/REDACTED" in paths
    assert "/v1/users/ana?api%5Fkey=REDACTED&Signature=REDACTED" in paths
