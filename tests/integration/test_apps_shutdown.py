"""A stop does not wait on another app's open inbox stream (tepat/processes.py
``_serve_asgi``): a live stream never ends by itself, so every app's streams are ended
when the API stops, not the default app's alone; the apps close after the API has
finished its requests."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import httpx
import jwt

from tests.support.app_deployment import deployment
from tests.support.waiting import eventually

SECRET = "shop-jwt-secret-0123456789abcdef0123456789"


async def test_an_apps_open_inbox_stream_ends_with_the_process(tmp_path: Path) -> None:
    opened = asyncio.Event()
    ended = asyncio.Event()

    async def follow(url: str, token: str) -> None:
        headers = {"Authorization": f"Bearer {token}"}
        path = "/v1/users/ana/inbox/stream"
        async with (
            httpx.AsyncClient(base_url=url, timeout=None) as c,
            c.stream("GET", path, headers=headers) as r,
        ):
            assert r.status_code == 200
            opened.set()
            async for _ in r.aiter_bytes():
                pass
        ended.set()

    async with deployment(tmp_path, "embedded") as d:
        key = await d.create_app("shop", jwt_secret=SECRET)
        async with d.client(key) as api:
            assert (await api.put("/v1/users/ana", json={"timezone": "UTC"})).status_code == 201
        claims = {"sub": "ana", "app": "shop", "exp": int(time.time()) + 600}
        stream = asyncio.create_task(follow(d.url, jwt.encode(claims, SECRET, "HS256")))
        await eventually(opened.is_set, what="shop's stream open")
    # the block's end stopped the process (it fails the test past 60 s): the stream ended
    await asyncio.wait_for(stream, timeout=10)
    assert ended.is_set()
