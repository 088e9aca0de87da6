"""``/docs`` and ``/redoc`` load scripts from a CDN without integrity on the dashboard's
origin: off by default, on with TEPAT_API_DOCS (issue 19, 8). ``/openapi.json`` stays."""

from __future__ import annotations

from pathlib import Path

import httpx

from api.app import create_app
from tepat.clock import FakeClock
from tepat.runtime import open_runtime
from tests.api.conftest import ADMIN_KEY, make_settings
from tests.support.fake_push import FakePush


async def test_the_cdn_docs_pages_are_off_by_default(client: httpx.AsyncClient) -> None:
    for path in ("/docs", "/redoc", "/docs/oauth2-redirect"):
        assert (await client.get(path)).status_code == 404, path
    assert (await client.get("/openapi.json")).status_code == 200


async def test_tepat_api_docs_turns_them_on(tmp_path: Path, clock: FakeClock) -> None:
    settings = make_settings(tmp_path).model_copy(update={"api_docs": True})
    async with open_runtime(settings, clock=clock, push=FakePush()) as rt:
        transport = httpx.ASGITransport(app=create_app(rt, ADMIN_KEY))
        async with httpx.AsyncClient(transport=transport, base_url="http://tepat.test") as c:
            docs = await c.get("/docs")
            assert docs.status_code == 200 and "swagger-ui" in docs.text
            assert (await c.get("/redoc")).status_code == 200
