"""``/v1/suppressions``: list, add and lift (admin key only), on both stores."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tepat.clock import FakeClock
from tepat.domain.contacts import SuppressionReason
from tepat.runtime import Runtime
from tests.api.conftest import ADMIN, STORES, bearer, error_fields, problem, runtime_on
from tests.api.helpers import ok
from tests.support.fake_push import FakePush

URL = "/v1/suppressions"


@pytest.fixture(params=STORES)
async def rt(
    request: pytest.FixtureRequest, tmp_path: Path, clock: FakeClock, push: FakePush
) -> AsyncIterator[Runtime]:
    """Suppressions are adapter code: every test on both stores."""
    async with runtime_on(request.param, tmp_path, clock, push, "tepat_suppressions") as r:
        yield r


async def add(client: httpx.AsyncClient, **body: Any) -> httpx.Response:
    return await client.post(URL, json=body, headers=ADMIN)


async def test_add_normalises_and_a_repeat_is_200_keeping_the_first(
    client: httpx.AsyncClient, rt: Runtime
) -> None:
    r = await add(client, channel="email", address="Ana@Example.COM", reason="hard_bounce")
    assert r.status_code == 201, r.text
    assert r.json() == {
        "channel": "email",
        "address": "Ana@example.com",
        "reason": "hard_bounce",
        "added_at": "2027-03-01T00:00:00Z",
        "source": "admin",
        "created": True,
    }
    again = await add(client, channel="email", address="Ana@EXAMPLE.com")  # manual: weaker
    assert again.status_code == 200, again.text
    assert (again.json()["reason"], again.json()["created"]) == ("hard_bounce", False)
    stronger = await ok(
        await add(client, channel="email", address="Ana@example.com", reason="complaint")
    )
    assert (stronger.json()["reason"], stronger.json()["created"]) == ("complaint", False)
    got = await rt.store.suppressions_for("email", ["Ana@example.com"])
    assert got["Ana@example.com"].reason is SuppressionReason.COMPLAINT


async def test_list_pages_with_a_cursor_and_filters_by_channel(client: httpx.AsyncClient) -> None:
    for i in range(5):
        await ok(await add(client, channel="email", address=f"u{i}@example.com"))
    await ok(await add(client, channel="sms", address="+62 812 3456 7890", reason="stop"))

    seen: list[tuple[str, str]] = []
    cursor: str | None = None
    while True:
        params: dict[str, Any] = {"limit": 2} | ({"cursor": cursor} if cursor else {})
        page = (await ok(await client.get(URL, params=params, headers=ADMIN))).json()
        seen.extend((s["channel"], s["address"]) for s in page["items"])
        cursor = page["next_cursor"]
        if cursor is None:
            break
        assert len(page["items"]) == 2
    assert seen == [("email", f"u{i}@example.com") for i in range(5)] + [("sms", "+6281234567890")]
    sms = (await ok(await client.get(URL, params={"channel": "sms"}, headers=ADMIN))).json()
    assert [(s["address"], s["reason"]) for s in sms["items"]] == [("+6281234567890", "stop")]
    assert sms["next_cursor"] is None


async def test_lift_removes_and_a_second_lift_is_404(client: httpx.AsyncClient) -> None:
    await ok(await add(client, channel="sms", address="+6281234567890", reason="stop"))
    # The address in the path is normalised too: "+" and spaces as a person writes it.
    r = await client.delete(f"{URL}/sms/%2B62%20812-3456-7890", headers=ADMIN)
    assert r.status_code == 204, r.text
    problem(await client.delete(f"{URL}/sms/+6281234567890", headers=ADMIN), 404)
    listed = (await ok(await client.get(URL, headers=ADMIN))).json()
    assert listed["items"] == []
    # Lifted, it can be suppressed again and is new again.
    assert (await add(client, channel="sms", address="+6281234567890")).status_code == 201


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"channel": "fax", "address": "a@example.com"}, "channel"),
        ({"channel": "email", "address": "nope"}, "address"),
        ({"channel": "sms", "address": "12"}, "address"),
        ({"channel": "email", "address": "a@example.com", "reason": "soft_bounce"}, "reason"),
        ({"channel": "email"}, "address"),
        ({"channel": "email", "address": "a@example.com", "extra": 1}, "extra"),
    ],
)
async def test_bad_input_is_a_422_naming_the_field(
    client: httpx.AsyncClient, body: dict[str, Any], field: str
) -> None:
    assert error_fields(await client.post(URL, json=body, headers=ADMIN)) == {field}
    assert (await ok(await client.get(URL, headers=ADMIN))).json()["items"] == []


async def test_bad_query_and_path_values_are_422s(client: httpx.AsyncClient) -> None:
    assert error_fields(await client.get(URL, params={"channel": "fax"}, headers=ADMIN)) == {
        "channel"
    }
    assert error_fields(await client.get(URL, params={"cursor": "%%%"}, headers=ADMIN)) == {
        "cursor"
    }
    assert error_fields(await client.get(URL, params={"cursor": "YWJj"}, headers=ADMIN)) == {
        "cursor"
    }
    assert error_fields(await client.get(URL, params={"limit": 0}, headers=ADMIN)) == {"limit"}
    assert error_fields(await client.delete(f"{URL}/fax/a@example.com", headers=ADMIN)) == {
        "channel"
    }
    assert error_fields(await client.delete(f"{URL}/email/nope", headers=ADMIN)) == {"address"}


async def test_only_the_admin_key_reaches_suppressions(
    client: httpx.AsyncClient, clock: FakeClock
) -> None:
    user = bearer("alice", clock)
    problem(await client.get(URL, headers=user), 403)
    problem(
        await client.post(URL, json={"channel": "email", "address": "a@example.com"}, headers=user),
        403,
    )
    problem(await client.delete(f"{URL}/email/a@example.com", headers=user), 403)
    problem(await client.get(URL), 401)
    assert (await ok(await client.get(URL, headers=ADMIN))).json()["items"] == []
