"""Per-app keys (TEPAT_APP_KEYS): a backend posts and follows events, and nothing else."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from pydantic import SecretStr

from api.app import create_app
from tepat.clock import FakeClock
from tepat.config import ConfigError, load_settings
from tepat.runtime import open_runtime
from tests.api.conftest import ADMIN, ADMIN_KEY, make_settings, problem
from tests.api.helpers import create_user

BILLING_KEY = "b" * 40
SHOP_KEY = "s" * 40


@pytest.fixture
async def app_client(tmp_path: Path, clock: FakeClock) -> AsyncIterator[httpx.AsyncClient]:
    settings = make_settings(tmp_path).model_copy(
        update={"app_keys": {"billing": SecretStr(BILLING_KEY), "shop": SecretStr(SHOP_KEY)}}
    )
    async with open_runtime(settings, clock=clock) as rt:
        transport = httpx.ASGITransport(app=create_app(rt, ADMIN_KEY))
        async with httpx.AsyncClient(transport=transport, base_url="http://tepat.test") as c:
            yield c


def event(event_id: str) -> dict[str, object]:
    return {
        "event_id": event_id,
        "type": "order.paid",
        "user_ids": ["alice"],
        "data": {},
        "occurred_at": "2027-03-01T00:00:00Z",
    }


async def test_an_app_key_posts_and_follows_events_only(app_client: httpx.AsyncClient) -> None:
    await create_user(app_client, "alice")
    billing = {"X-API-Key": BILLING_KEY}
    r = await app_client.post("/v1/events", json=event("inv-1"), headers=billing)
    assert r.status_code == 202, r.text
    got = await app_client.get("/v1/events/inv-1", headers=billing)
    assert got.status_code == 200 and got.json()["event_id"] == "inv-1"
    # Another app's event is not there for it (issue 19: app keys are isolated).
    problem(await app_client.get("/v1/events/inv-1", headers={"X-API-Key": SHOP_KEY}), 404)
    # nothing else: users, templates, admin, webhooks
    for method, path in (
        ("GET", "/v1/users/alice"),
        ("PUT", "/v1/templates/order.paid/push/en"),
        ("GET", "/v1/admin/queues"),
        ("GET", "/v1/webhooks"),
        ("GET", "/v1/suppressions"),
    ):
        problem(await app_client.request(method, path, headers=billing), 403)
    problem(
        await app_client.post("/v1/events", json=event("x"), headers={"X-API-Key": "n" * 40}), 401
    )
    assert (await app_client.get("/v1/admin/queues", headers=ADMIN)).status_code == 200


@pytest.mark.parametrize(
    ("value", "words"),
    [
        ("not json", "expected a JSON object of app keys"),
        (json.dumps({"billing": "short"}), "at least 32 characters"),
        (json.dumps({"Billing!": "k" * 32}), "app names are lower-case"),
        (json.dumps({"a": "k" * 32, "b": "k" * 32}), "two apps share one key"),
    ],
)
def test_a_bad_app_keys_setting_stops_with_one_line(
    monkeypatch: pytest.MonkeyPatch, value: str, words: str
) -> None:
    monkeypatch.setenv("TEPAT_APP_KEYS", value)
    with pytest.raises(ConfigError) as e:
        load_settings()
    line = str(e.value)
    assert "\n" not in line and line.startswith("tepat: bad configuration: TEPAT_APP_KEYS: ")
    assert words in line
