"""/v1/templates: versions, idempotent PUT, listing, preview, and every bad input a 422
naming the field (issue 12)."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from api.app import create_app
from tepat.clock import FakeClock
from tepat.domain.templates import MAX_PART_CHARS
from tepat.runtime import open_runtime
from tests.api.conftest import ADMIN, ADMIN_KEY, START, bearer, make_settings, problem
from tests.support.fake_push import FakePush

PUSH_URL = "/v1/templates/order.paid/push/en"
PAID = {"title": "Order {{ order_id }} paid", "body": "Thanks, {{ name }}"}


def errors(response: httpx.Response) -> dict[str, str]:
    body = problem(response, 422)
    found: list[dict[str, str]] = body["errors"]  # type: ignore[assignment]
    return {e["field"]: e["message"] for e in found}


async def test_put_creates_versions_and_an_identical_put_is_a_retry(
    client: httpx.AsyncClient,
) -> None:
    r = await client.put(PUSH_URL, json=PAID, headers=ADMIN)
    assert r.status_code == 201, r.text
    first = r.json()
    assert first["version"] == 1
    assert first["id"] == "order.paid:push:en:1"
    assert first["variables"] == ["name", "order_id"]
    assert r.headers["location"] == f"{PUSH_URL}?version=1"

    again = await client.put(PUSH_URL, json=PAID, headers=ADMIN)
    assert again.status_code == 200
    assert again.json() == first

    edited = await client.put(PUSH_URL, json={**PAID, "title": "Paid!"}, headers=ADMIN)
    assert edited.status_code == 201
    assert edited.json()["version"] == 2

    latest = await client.get(PUSH_URL, headers=ADMIN)
    assert latest.json()["version"] == 2
    old = await client.get(PUSH_URL, params={"version": 1}, headers=ADMIN)
    assert old.json() == first
    missing = await client.get(PUSH_URL, params={"version": 3}, headers=ADMIN)
    problem(missing, 404)


async def test_concurrent_puts_each_get_a_version(client: httpx.AsyncClient) -> None:
    bodies = [{**PAID, "title": f"v{i}"} for i in range(6)]
    answers = await asyncio.gather(*(client.put(PUSH_URL, json=b, headers=ADMIN) for b in bodies))
    assert sorted(a.json()["version"] for a in answers) == [1, 2, 3, 4, 5, 6]
    assert {a.status_code for a in answers} == {201}


async def test_list_shows_the_latest_of_each(client: httpx.AsyncClient) -> None:
    await client.put(PUSH_URL, json=PAID, headers=ADMIN)
    await client.put(PUSH_URL, json={**PAID, "body": "x"}, headers=ADMIN)
    await client.put("/v1/templates/order.paid/inbox/pt-BR", json=PAID, headers=ADMIN)
    r = await client.get("/v1/templates", headers=ADMIN)
    assert [t["id"] for t in r.json()["templates"]] == [
        "order.paid:inbox:pt-BR:1",
        "order.paid:push:en:2",
    ]
    only = await client.get("/v1/templates", params={"type": "invoice.overdue"}, headers=ADMIN)
    assert only.json() == {"templates": [], "next_cursor": None}
    assert "type" in errors(
        await client.get("/v1/templates", params={"type": "Nope"}, headers=ADMIN)
    )


async def test_locale_tags_are_stored_canonical(client: httpx.AsyncClient) -> None:
    r = await client.put("/v1/templates/order.paid/push/pt_br", json=PAID, headers=ADMIN)
    assert r.json()["locale"] == "pt-BR"
    assert (await client.get("/v1/templates/order.paid/push/pt-BR", headers=ADMIN)).is_success


async def test_preview_falls_back_and_says_which_locale_it_used(
    client: httpx.AsyncClient,
) -> None:
    await client.put(PUSH_URL, json=PAID, headers=ADMIN)
    data = {"order_id": 8841, "name": "Ana"}
    body = {"type": "order.paid", "channel": "push", "locale": "pt-BR", "data": data}
    r = await client.post("/v1/templates/preview", json=body, headers=ADMIN)
    assert r.status_code == 200, r.text
    out = r.json()
    assert (out["locale_requested"], out["locale"]) == ("pt-BR", "en")
    assert out["template_id"] == "order.paid:push:en:1"
    assert out["rendered"] == {"title": "Order 8841 paid", "body": "Thanks, Ana", "data": {}}

    await client.put(
        "/v1/templates/order.paid/push/pt", json={**PAID, "title": "Pago"}, headers=ADMIN
    )
    out = (await client.post("/v1/templates/preview", json=body, headers=ADMIN)).json()
    assert (out["locale"], out["rendered"]["title"]) == ("pt", "Pago")

    pinned = {**body, "locale": "en", "version": 1}
    out = (await client.post("/v1/templates/preview", json=pinned, headers=ADMIN)).json()
    assert out["rendered"]["title"] == "Order 8841 paid"


async def test_preview_of_an_inline_template(client: httpx.AsyncClient) -> None:
    body = {
        "type": "order.paid",
        "channel": "inbox",
        "locale": "en",
        "template": {"title": "Paid", "body": "b", "html": "<p>{{ name }}</p>", "link": "/o/1"},
        "data": {"name": "<Ana>"},
    }
    r = await client.post("/v1/templates/preview", json=body, headers=ADMIN)
    assert r.status_code == 200, r.text
    assert r.json()["rendered"] == {
        "title": "Paid",
        "body": "b",
        "html": "<p>&lt;Ana&gt;</p>",
        "link": "/o/1",
    }
    assert r.json()["template_id"] is None


async def test_preview_missing_a_variable_names_it(client: httpx.AsyncClient) -> None:
    await client.put(PUSH_URL, json=PAID, headers=ADMIN)
    body = {"type": "order.paid", "channel": "push", "locale": "en", "data": {"order_id": 1}}
    r = await client.post("/v1/templates/preview", json=body, headers=ADMIN)
    found = errors(r)
    assert "data.name" in found
    assert "missing variable 'name'" in found["data.name"]
    assert (r.json()["reason"], r.json()["variable"]) == ("render_error", "name")


async def test_template_problems_carry_their_reason(client: httpx.AsyncClient) -> None:
    bad = await client.put(PUSH_URL, json={**PAID, "body": "{{"}, headers=ADMIN)
    assert problem(bad, 422)["reason"] == "compile_error"
    big = await client.put(
        PUSH_URL, json={**PAID, "body": "x" * (MAX_PART_CHARS + 1)}, headers=ADMIN
    )
    assert problem(big, 422)["reason"] == "too_large"


async def test_preview_without_any_template_is_404(client: httpx.AsyncClient) -> None:
    body = {"type": "order.paid", "channel": "push", "locale": "pt-BR", "data": {}}
    r = problem(await client.post("/v1/templates/preview", json=body, headers=ADMIN), 404)
    assert "pt-BR, pt, en" in str(r["detail"])


@pytest.mark.parametrize(
    ("url", "body", "field", "words"),
    [
        ("/v1/templates/order.refunded/push/en", PAID, "type", "unknown event type"),
        ("/v1/templates/Order/push/en", PAID, "type", "lower-case dotted"),
        ("/v1/templates/order.paid/fax/en", PAID, "channel", "unknown channel"),
        ("/v1/templates/order.paid/email/en", PAID, "channel", "does not route to 'email'"),
        ("/v1/templates/otp.requested/inbox/en", PAID, "channel", "does not route to"),
        ("/v1/templates/order.paid/push/english", PAID, "locale", "locale tag"),
        (PUSH_URL, {**PAID, "body": "line\n{% if %}"}, "body", "line 2"),
        (PUSH_URL, {**PAID, "body": "x" * (MAX_PART_CHARS + 1)}, "body", "too large"),
        (PUSH_URL, {"body": "b"}, "title", "required"),
        (PUSH_URL, {**PAID, "html": "<p>"}, "html", "not a part of a push template"),
        (PUSH_URL, {**PAID, "data": {"u": "{{"}}, "data.u", "does not compile"),
        (PUSH_URL, {**PAID, "colour": "red"}, "colour", "Extra inputs"),
    ],
)
async def test_bad_input_is_422_naming_the_field(
    client: httpx.AsyncClient, url: str, body: dict[str, Any], field: str, words: str
) -> None:
    found = errors(await client.put(url, json=body, headers=ADMIN))
    assert field in found, found
    assert words in found[field]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"type": "order.nope", "channel": "push", "locale": "en"}, "type"),
        ({"type": "order.paid", "channel": "sms", "locale": "en"}, "channel"),
        ({"type": "order.paid", "channel": "push", "locale": "xx-"}, "locale"),
        (
            {
                "type": "order.paid",
                "channel": "push",
                "locale": "en",
                "template": {"title": "{{", "body": "b"},
            },
            "template.title",
        ),
        (
            {"type": "order.paid", "channel": "push", "locale": "en", "template": {"title": "t"}},
            "template.body",
        ),
        ({"type": "order.paid", "channel": "push", "locale": "en", "data": []}, "data"),
    ],
)
async def test_bad_preview_is_422_naming_the_field(
    client: httpx.AsyncClient, body: dict[str, Any], field: str
) -> None:
    found = errors(await client.post("/v1/templates/preview", json=body, headers=ADMIN))
    assert field in found, found


async def test_templates_need_the_admin_key(client: httpx.AsyncClient, clock: FakeClock) -> None:
    problem(await client.get("/v1/templates"), 401)
    problem(await client.get("/v1/templates", headers=bearer("u1", clock)), 403)
    problem(await client.put(PUSH_URL, json=PAID, headers=bearer("u1", clock)), 403)


# --- property: whatever the sources, never a 500


class LiveApi:
    """The API on its own loop thread, so hypothesis (synchronous) can drive it."""

    def __init__(self, tmp: Path) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()
        self._tmp = tmp
        self._stack: Any = None
        self.client: httpx.AsyncClient | None = None
        self.call(self._open())

    def call(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout=60)

    async def _open(self) -> None:
        from contextlib import AsyncExitStack

        self._stack = AsyncExitStack()
        settings_ = make_settings(self._tmp)
        rt = await self._stack.enter_async_context(
            open_runtime(settings_, clock=FakeClock(START), push=FakePush())
        )
        app = create_app(rt, ADMIN_KEY)
        self.client = await self._stack.enter_async_context(
            httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t")
        )

    def close(self) -> None:
        self.call(self._stack.aclose())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=10)
        self.loop.close()


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveApi]:
    api = LiveApi(tmp_path_factory.mktemp("templates-fuzz"))
    yield api
    api.close()


_BITS = st.sampled_from(
    [
        "{{",
        "}}",
        "{%",
        "%}",
        " if ",
        "endif",
        " for x in ",
        "endfor",
        "name",
        "|",
        "upper",
        "(",
        ")",
        "'",
        "*",
        "**",
        "%",
        "range(",
        "9",
        ".__class__",
        "\n",
        "\ud800",
        "é",
    ]
)
SOURCE = st.one_of(st.text(max_size=100), st.lists(_BITS, max_size=25).map("".join))


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(title=SOURCE, body=SOURCE, data_value=SOURCE, channel=st.sampled_from(["push", "inbox"]))
def test_arbitrary_sources_never_give_a_500(
    live: LiveApi, title: str, body: str, data_value: str, channel: str
) -> None:
    parts: dict[str, Any] = {"title": title, "body": body}
    parts["data" if channel == "push" else "html"] = (
        {"k": data_value} if channel == "push" else data_value
    )

    async def scenario() -> None:
        c = live.client
        assert c is not None
        # ASCII-escaped JSON: a lone surrogate is valid JSON text, and must be a 422 too
        put = await c.put(
            f"/v1/templates/order.paid/{channel}/en",
            content=json.dumps(parts),
            headers={**ADMIN, "Content-Type": "application/json"},
        )
        assert put.status_code in (200, 201, 422), put.text
        preview = {
            "type": "order.paid",
            "channel": channel,
            "locale": "en",
            "template": parts,
            "data": {"name": data_value},
        }
        r = await c.post(
            "/v1/templates/preview",
            content=json.dumps(preview),
            headers={**ADMIN, "Content-Type": "application/json"},
        )
        assert r.status_code in (200, 422), r.text

    live.call(scenario())


# --- issue 19: limits a template cannot get around


# Each built 256 MB (or spun for seconds, or ended in a RecursionError and a 500) before.
ATTACKS = {
    "star_width": '{{ "%*s" % (268435456, "x") }}',
    "format_star_width": '{{ "%*s" | format(268435456, "x") }}',
    "join": '{{ range(1000) | map("string") | join("x" * 60000) }}',
    "str_join": '{{ ("x" * 60000).join(range(1000) | map("string")) }}',
    "repeated_concat": '{% set a = "x" * 60000 %}'
    + "{% set a = a ~ a %}" * 12
    + "{{ a | length }}",
    "repeated_plus": '{% set a = "x" * 60000 %}' + "{% set a = a + a %}" * 12 + "{{ a | length }}",
    "block": "{% set a %}{% for i in range(1000) %}{% for j in range(99) %}"
    + "x" * 4000
    + "{% endfor %}{% endfor %}{% endset %}{{ a | length }}",
    "lipsum": "{{ lipsum(100000, False, 100000, 100000) | length }}",
    "slices": "{{ [1] | slice(100000000) | list | length }}",
    "long_attribute": "{{ a" + ".b" * 2500 + " }}",
    "filter_chain": "{{ a" + " | e" * 2000 + " }}",
    "plus_chain": "{{ 1" + " + 1" * 2000 + " }}",
}


@pytest.mark.parametrize("source", ATTACKS.values(), ids=ATTACKS.keys())
async def test_a_template_beyond_the_limits_is_a_422_naming_the_part_on_save_and_preview(
    client: httpx.AsyncClient, source: str
) -> None:
    preview = await client.post(
        "/v1/templates/preview",
        json={
            "type": "order.paid",
            "channel": "push",
            "locale": "en",
            "template": {"title": "t", "body": source},
            "data": {"a": 1},
        },
        headers=ADMIN,
    )
    assert names_the_body(errors(preview), "template."), preview.text
    saved = await client.put(PUSH_URL, json={"title": "t", "body": source}, headers=ADMIN)
    if saved.status_code == 201:  # compiles: refused when rendered, as the preview was
        stored = await client.post(
            "/v1/templates/preview",
            json={"type": "order.paid", "channel": "push", "locale": "en", "data": {"a": 1}},
            headers=ADMIN,
        )
        assert names_the_body(errors(stored)), stored.text
    else:
        assert names_the_body(errors(saved)), saved.text


def names_the_body(found: dict[str, str], prefix: str = "") -> bool:
    """The part is the field, or (for a name the sandbox does not offer, such as lipsum:
    a missing variable) the message says which part used it."""
    return f"{prefix}body" in found or any(
        m.endswith(f"used by {prefix}body at line 1") for m in found.values()
    )
