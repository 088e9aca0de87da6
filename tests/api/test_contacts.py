"""``/v1/users/{id}/contacts``: a user's e-mail address and phone number, on both stores."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from tepat.clock import FakeClock
from tepat.runtime import Runtime
from tests.api.conftest import ADMIN, STORES, bearer, error_fields, problem, runtime_on
from tests.api.helpers import create_user, ok
from tests.support.fake_push import FakePush

URL = "/v1/users/alice/contacts"


@pytest.fixture(params=STORES)
async def rt(
    request: pytest.FixtureRequest, tmp_path: Path, clock: FakeClock, push: FakePush
) -> AsyncIterator[Runtime]:
    """Contacts are adapter code: every test on both stores."""
    async with runtime_on(request.param, tmp_path, clock, push, "tepat_contacts") as r:
        yield r


async def test_set_list_replace_and_remove_contacts(client: httpx.AsyncClient, rt: Runtime) -> None:
    await create_user(client, "alice")
    r = await ok(
        await client.put(
            f"{URL}/email", json={"address": "Ana.Lee@Example.COM", "verified": True}, headers=ADMIN
        )
    )
    assert r.json() == {
        "channel": "email",
        "address": "Ana.Lee@example.com",  # the domain lower-cased, the mailbox kept
        "verified": True,
        "updated_at": "2027-03-01T00:00:00Z",
    }
    r = await ok(
        await client.put(f"{URL}/sms", json={"address": "+62 812-3456-7890"}, headers=ADMIN)
    )
    assert (r.json()["address"], r.json()["verified"]) == ("+6281234567890", False)

    listed = (await ok(await client.get(URL, headers=ADMIN))).json()["contacts"]
    assert [(c["channel"], c["address"]) for c in listed] == [
        ("email", "Ana.Lee@example.com"),
        ("sms", "+6281234567890"),
    ]
    # What the send path reads: the store holds the normalised address.
    got = await rt.store.contacts_for_users(["alice"], "sms")
    assert got["alice"].address == "+6281234567890"

    await ok(await client.put(f"{URL}/email", json={"address": "new@example.org"}, headers=ADMIN))
    listed = (await ok(await client.get(URL, headers=ADMIN))).json()["contacts"]
    assert listed[0]["address"] == "new@example.org" and listed[0]["verified"] is False

    assert (await client.delete(f"{URL}/email", headers=ADMIN)).status_code == 204
    assert (await client.delete(f"{URL}/email", headers=ADMIN)).status_code == 204  # idempotent
    listed = (await ok(await client.get(URL, headers=ADMIN))).json()["contacts"]
    assert [c["channel"] for c in listed] == ["sms"]


async def test_a_user_token_reaches_its_own_contacts_only(
    client: httpx.AsyncClient, clock: FakeClock
) -> None:
    await create_user(client, "alice")
    await create_user(client, "bob")
    own = bearer("alice", clock)
    await ok(await client.put(f"{URL}/email", json={"address": "a@example.com"}, headers=own))
    assert len((await ok(await client.get(URL, headers=own))).json()["contacts"]) == 1
    other = bearer("bob", clock)
    problem(await client.get(URL, headers=other), 403)
    problem(await client.put(f"{URL}/email", json={"address": "b@example.com"}, headers=other), 403)
    problem(await client.delete(f"{URL}/email", headers=other), 403)
    problem(await client.get(URL), 401)
    listed = (await ok(await client.get(URL, headers=own))).json()["contacts"]
    assert listed[0]["address"] == "a@example.com"  # bob changed nothing


@pytest.mark.parametrize(
    ("channel", "body", "field"),
    [
        ("email", {"address": "not-an-address"}, "address"),
        ("email", {"address": "a@localhost"}, "address"),
        ("email", {"address": "a b@example.com"}, "address"),
        ("email", {"address": ""}, "address"),
        ("email", {"address": "x" * 400 + "@example.com"}, "address"),
        # Header injection: a line feed inside the address (a regex's $ matches before one).
        ("email", {"address": "ana\n@example.com"}, "address"),
        ("email", {"address": "ana@exa\n.example.com"}, "address"),
        ("email", {"address": "ana@example.com\r\nBcc: x@evil.example"}, "address"),
        ("email", {"address": "a\u0000b@example.com"}, "address"),
        ("sms", {"address": "0812 3456 7890"}, "address"),  # national: no country
        ("sms", {"address": "+1 555"}, "address"),
        ("sms", {"address": "call me"}, "address"),
        ("fax", {"address": "a@example.com"}, "channel"),
        ("push", {"address": "a@example.com"}, "channel"),
        ("email", {"address": "a@example.com", "verified": "yes"}, "verified"),
        ("email", {"address": 42}, "address"),
        ("email", {"address": "a@example.com", "phone": "1"}, "phone"),
        ("email", {}, "address"),
    ],
)
async def test_bad_input_is_a_422_naming_the_field(
    client: httpx.AsyncClient, channel: str, body: dict[str, object], field: str
) -> None:
    await create_user(client, "alice")
    assert error_fields(await client.put(f"{URL}/{channel}", json=body, headers=ADMIN)) == {field}
    assert (await ok(await client.get(URL, headers=ADMIN))).json()["contacts"] == []


async def test_an_unknown_channel_on_delete_is_a_422(client: httpx.AsyncClient) -> None:
    await create_user(client, "alice")
    assert error_fields(await client.delete(f"{URL}/fax", headers=ADMIN)) == {"channel"}


async def test_an_unknown_user_is_a_404(client: httpx.AsyncClient) -> None:
    problem(
        await client.put(
            "/v1/users/nobody/contacts/email", json={"address": "a@example.com"}, headers=ADMIN
        ),
        404,
    )
    problem(await client.get("/v1/users/nobody/contacts", headers=ADMIN), 404)
    problem(await client.delete("/v1/users/nobody/contacts/email", headers=ADMIN), 404)
