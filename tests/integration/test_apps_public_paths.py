"""An app's public paths (issue 23): no credentials, the path names the app.

An unsubscribe link of app shop, as its e-mails carry it (its links built from its
settings: the deployment's public URL followed by /apps/shop, a secret derived for shop),
works at /apps/shop/u/<token> and opts out shop's user alone; the same token is forged
for the default app (/u/<token>) and for any other app. Over HTTP, on a deployment
serving the three, on both brokers.
"""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from tepat.domain.apps import DEFAULT_APP
from tepat.wiring import build_unsubscribe_links
from tests.support.app_deployment import add_user_with_device, app_id_for, deployment
from tests.support.provider_sandboxes import BROKERS

pytestmark = pytest.mark.parametrize("broker", BROKERS)
ONE_CLICK = {
    "content": "List-Unsubscribe=One-Click",
    "headers": {"content-type": "application/x-www-form-urlencoded"},
}


async def test_an_apps_unsubscribe_link_acts_in_that_app_alone(tmp_path: Path, broker: str) -> None:
    async with deployment(tmp_path, broker) as d:
        shop, other = app_id_for(broker, "shop"), app_id_for(broker, "other")
        keys = {DEFAULT_APP: "", shop: await d.create_app(shop), other: await d.create_app(other)}
        for app_id, key in keys.items():
            client = d.client(key) if key else d.operator
            await add_user_with_device(client, "ana", f"ExponentPushToken[{app_id}-ana]")
            if key:
                await client.aclose()

        shop_rt = d.runtime(shop)
        links = build_unsubscribe_links(shop_rt.settings, shop_rt.clock)
        assert links is not None
        link = links.url_for("ana", "custom", "email")
        token = link.rpartition("/u/")[2]
        assert link == f"{d.url}/apps/{shop}/u/{token}"

        async with httpx.AsyncClient(base_url=d.url, timeout=30) as public:  # no credentials
            for path in (f"/u/{token}", f"/apps/{other}/u/{token}"):
                r = await public.post(path, **ONE_CLICK)  # type: ignore[arg-type]
                assert r.status_code == 403, (path, r.text)
                assert r.json()["errors"][0]["field"] == "token"
            # an app no one serves: nothing to act in
            r = await public.post(f"/apps/nosuchapp/u/{token}", **ONE_CLICK)  # type: ignore[arg-type]
            assert r.status_code == 404, r.text
            for app_id in (DEFAULT_APP, shop, other):
                assert await d.runtime(app_id).store.get_preferences("ana") == {}

            r = await public.post(link.removeprefix(d.url), **ONE_CLICK)  # type: ignore[arg-type]
            assert r.status_code == 200, r.text
            assert r.json() == {"unsubscribed": True, "category": "custom", "channel": "email"}
            page = await public.get(link.removeprefix(d.url))
            assert page.status_code == 200 and "custom" in page.text

        assert await shop_rt.store.get_preferences("ana") == {"custom.email": False}
        for app_id in (DEFAULT_APP, other):
            assert await d.runtime(app_id).store.get_preferences("ana") == {}
