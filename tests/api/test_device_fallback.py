"""A device's optional fallback token for another push kind (failover): checked as its
primary token is, stored, and shown."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.api.conftest import ADMIN, error_fields
from tests.api.helpers import ok
from tests.api.test_device_kinds import DEVICE, TOKENS, _alice, rt  # noqa: F401 (fixtures)


async def test_a_fallback_round_trips(client: httpx.AsyncClient) -> None:
    fallback = {"kind": "fcm", "token": TOKENS["fcm"]}
    body = {"push_token": TOKENS["expo"], "fallback": fallback}
    assert (await ok(await client.put(DEVICE, json=body, headers=ADMIN))).json()[
        "fallback"
    ] == fallback
    listed = (await client.get("/v1/users/alice/devices", headers=ADMIN)).json()["devices"]
    assert [d["fallback"] for d in listed] == [fallback]
    put = await ok(await client.put(DEVICE, json={"push_token": TOKENS["expo"]}, headers=ADMIN))
    assert put.json()["fallback"] is None


@pytest.mark.parametrize(
    ("fallback", "field"),
    [
        ({"kind": "apns", "token": TOKENS["fcm"]}, "fallback.token"),
        ({"kind": "fcm", "token": "has spaces"}, "fallback.token"),
        ({"kind": "pager", "token": TOKENS["fcm"]}, "fallback.kind"),
        ({"kind": "fcm"}, "fallback.token"),
    ],
)
async def test_a_fallback_token_is_checked_for_its_kind(
    client: httpx.AsyncClient, fallback: dict[str, Any], field: str
) -> None:
    body = {"push_token": TOKENS["expo"], "fallback": fallback}
    r = await client.put(DEVICE, json=body, headers=ADMIN)
    assert error_fields(r) == {field}
