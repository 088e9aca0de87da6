"""``/docs`` and ``/redoc`` run scripts from a CDN (pinned, with integrity) on the dashboard's
origin: off by default, on with TEPAT_API_DOCS (issue 19, 8). ``/openapi.json`` stays."""

from __future__ import annotations

import re
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


async def test_the_docs_pages_load_only_pinned_assets_with_integrity(
    tmp_path: Path, clock: FakeClock
) -> None:
    settings = make_settings(tmp_path).model_copy(update={"api_docs": True})
    async with open_runtime(settings, clock=clock, push=FakePush()) as rt:
        transport = httpx.ASGITransport(app=create_app(rt, ADMIN_KEY))
        async with httpx.AsyncClient(transport=transport, base_url="http://tepat.test") as c:
            for path, wanted in (("/docs", 2), ("/redoc", 1)):
                page = (await c.get(path)).text
                tags = re.findall(r"<(?:script|link)\b[^>]*\b(?:src|href)=\"[^\"]+\"[^>]*>", page)
                assert len(tags) == wanted, (path, tags)
                for tag in tags:
                    url = re.search(r"(?:src|href)=\"([^\"]+)\"", tag)
                    assert url is not None
                    # one release, never a moving major like @5
                    assert re.search(r"@\d+\.\d+\.\d+/", url[1]), tag
                    assert re.search(r'integrity="sha384-[A-Za-z0-9+/]{64}"', tag), tag
                    assert 'crossorigin="anonymous"' in tag, tag
