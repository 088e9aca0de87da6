"""A device's optional fallback token for another push kind (failover): checked as its
primary token is, stored, and shown."""

from __future__ import annotations

import asyncio
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


async def test_the_same_put_twice_twice_at_once_and_after_a_delete_keeps_one_fallback(
    client: httpx.AsyncClient,
) -> None:
    """As an app does it: a retried PUT, two at once, then a logout (DELETE) and the
    same phone registered again."""
    fallback = {"kind": "fcm", "token": TOKENS["fcm"]}
    body = {"push_token": TOKENS["expo"], "fallback": fallback}
    first = (await ok(await client.put(DEVICE, json=body, headers=ADMIN))).json()
    again = (await ok(await client.put(DEVICE, json=body, headers=ADMIN))).json()
    assert (again["fallback"], again["active"]) == (first["fallback"], True)
    both = await asyncio.gather(*(client.put(DEVICE, json=body, headers=ADMIN) for _ in "ab"))
    assert [r.status_code for r in both] == [200, 200]
    listed = (await client.get("/v1/users/alice/devices", headers=ADMIN)).json()["devices"]
    assert [(d["fallback"], d["active"]) for d in listed] == [(fallback, True)]
    assert (await client.delete(DEVICE, headers=ADMIN)).status_code == 204
    back = (await ok(await client.put(DEVICE, json=body, headers=ADMIN))).json()
    assert (back["fallback"], back["active"]) == (fallback, True)
    listed = (await client.get("/v1/users/alice/devices", headers=ADMIN)).json()["devices"]
    assert [(d["fallback"], d["active"]) for d in listed] == [(fallback, True)]
