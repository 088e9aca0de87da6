"""Templates: checking at save time, rendering in the sandbox, limits, locale fallback."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tepat.domain.errors import DomainError
from tepat.domain.locales import canonical_locale, fallback_chain
from tepat.domain.routing import Channel
from tepat.domain.templates import (
    INBOX_LIMITS,
    MAX_PART_CHARS,
    MAX_SOURCE_BYTES,
    PUSH_MAX_BYTES,
    TemplateError,
    TemplateFailure,
    TemplateKey,
    check_parts,
    compile_parts,
    content_hash,
    parse_template_id,
    render,
    template_id,
)

PUSH, INBOX = Channel.PUSH, Channel.INBOX


def push(values: dict[str, Any], /, **parts: Any) -> dict[str, Any]:
    return render(compile_parts(PUSH, check_parts(PUSH, parts)), values).as_dict()


def inbox(values: dict[str, Any], /, **parts: Any) -> dict[str, Any]:
    return render(compile_parts(INBOX, check_parts(INBOX, parts)), values).as_dict()


def fails(fn: Any, *args: Any, **kwargs: Any) -> TemplateError:
    with pytest.raises(TemplateError) as e:
        fn(*args, **kwargs)
    return e.value


# --- rendering


def test_push_renders_title_body_and_data() -> None:
    out = push(
        {"order_id": 8841, "name": "Ana"},
        title="Order {{ order_id }} paid",
        body="Thanks, {{ name }}",
        data={"url": "app://orders/{{ order_id }}"},
    )
    assert out == {
        "title": "Order 8841 paid",
        "body": "Thanks, Ana",
        "data": {"url": "app://orders/8841"},
    }


def test_an_unknown_variable_fails_the_render_naming_it_never_a_blank() -> None:
    e = fails(push, {"name": "Ana"}, title="Hi", body="line one\n{{ name }} {{ amount }}")
    assert e.reason is TemplateFailure.RENDER_ERROR
    assert e.variable == "amount"
    assert e.field == "data.amount"
    assert "line 2" in e.message


def test_a_missing_attribute_fails_too() -> None:
    e = fails(push, {"order": {}}, title="Hi", body="{{ order.id }}")
    assert e.reason is TemplateFailure.RENDER_ERROR
    assert "id" in e.message


def test_optional_variables_can_be_tested_or_defaulted() -> None:
    out = push({}, title="{{ name | default('there') }}", body="{% if x is defined %}x{% endif %}.")
    assert out["title"] == "there"
    assert out["body"] == "."


def test_only_the_html_part_is_autoescaped() -> None:
    out = inbox(
        {"n": "<b>&"},
        title="{{ n }}",
        body="{{ n }}",
        html="<p>{{ n }}</p>",
        link="https://example.com/?q={{ n | urlencode }}",
    )
    assert out["title"] == "<b>&"
    assert out["body"] == "<b>&"
    assert out["html"] == "<p>&lt;b&gt;&amp;</p>"
    assert out["link"] == "https://example.com/?q=%3Cb%3E%26"


@pytest.mark.parametrize("link", ["javascript:alert(1)", " JavaScript:x", "data:text/html,x", "x"])
def test_an_inbox_link_must_be_a_url_or_path(link: str) -> None:
    e = fails(inbox, {}, title="t", body="b", link=link)
    assert e.field == "link"
    assert e.reason is TemplateFailure.RENDER_ERROR


@pytest.mark.parametrize("link", ["https://x.test/a", "myapp://orders/1", "/orders/1"])
def test_good_inbox_links(link: str) -> None:
    assert inbox({}, title="t", body="b", link=link)["link"] == link


def test_rendered_push_must_fit_expos_payload() -> None:
    fits = "x" * (PUSH_MAX_BYTES - 100)
    assert push({"v": fits}, title="t", body="{{ v }}")["body"] == fits
    e = fails(push, {"v": "é" * (PUSH_MAX_BYTES // 2)}, title="t", body="{{ v }}")
    assert e.reason is TemplateFailure.RENDER_ERROR
    assert "too large" in e.message


def test_rendered_inbox_parts_have_limits() -> None:
    e = fails(inbox, {"v": "x" * (INBOX_LIMITS["title"] + 1)}, title="{{ v }}", body="b")
    assert e.field == "title"


@pytest.mark.parametrize(
    "source",
    [
        "{{ 'a' * 1000000000 }}",
        "{{ 2 ** 100000000 }}",
        "{% for i in range(100000000) %}{% endfor %}",
        "{{ 'a'.ljust(1000000000) }}",
        "{{ 'a' | center(1000000000) }}",
        "{{ '%1000000000s' % 'a' }}",
        "{{ '%1000000000s' | format('a') }}",
        "{{ ('a' * 60000) | replace('a', 'a' * 60000) }}",
        "{{ ().__class__.__mro__ }}",
        "{{ cycler.__init__.__globals__ }}",
        "{{ 1 / 0 }}",
        "{% for a in range(999) %}{% for b in range(999) %}{% endfor %}{% endfor %}",
        "{% macro f(k) %}{% if k %}{{ f(k-1) }}{{ f(k-1) }}{% endif %}{% endmacro %}{{ f(40) }}",
    ],
)
def test_the_sandbox_bounds_what_a_template_can_do(source: str) -> None:
    e = fails(push, {}, title="t", body=source)
    assert e.reason is TemplateFailure.RENDER_ERROR
    assert e.field == "body"


def test_loops_over_large_data_stop_at_the_step_budget() -> None:
    items = list(range(1000))
    assert push({"items": items}, title="t", body="{{ items | length }}")["body"] == "1000"
    one_loop = "{% for x in items %}{% endfor %}ok"
    assert push({"items": items}, title="t", body=one_loop)["body"] == "ok"
    nested = "{% for x in items %}{% for y in items %}{% endfor %}{% endfor %}"
    e = fails(push, {"items": items}, title="t", body=nested)
    assert "steps" in e.message


def test_the_loop_guard_name_is_reserved() -> None:
    e = fails(check_parts, PUSH, {"title": "t", "body": "{% set _tepat_loop = 1 %}"})
    assert e.reason is TemplateFailure.INVALID


# --- checking at save time


def test_a_syntax_error_is_refused_with_its_line() -> None:
    e = fails(check_parts, PUSH, {"title": "ok", "body": "one\ntwo {{ x }\n"})
    assert e.reason is TemplateFailure.COMPILE_ERROR
    assert e.field == "body"
    assert "line 2" in e.message


def test_a_syntax_error_in_push_data_names_the_key() -> None:
    e = fails(check_parts, PUSH, {"title": "t", "body": "b", "data": {"url": "{% if %}"}})
    assert e.field == "data.url"


@pytest.mark.parametrize(
    ("channel", "parts", "field"),
    [
        (PUSH, {"body": "b"}, "title"),
        (PUSH, {"title": "t", "body": "b", "html": "<p>"}, "html"),
        (INBOX, {"title": "t", "body": "b", "data": {}}, "data"),
        (PUSH, {"title": 3, "body": "b"}, "title"),
        (PUSH, {"title": "t", "body": "b", "data": {"bad key": "x"}}, "data.bad key"),
        (PUSH, {"title": "t", "body": "b", "data": {"k": 1}}, "data.k"),
    ],
)
def test_bad_parts_are_refused_naming_the_part(
    channel: Channel, parts: dict[str, Any], field: str
) -> None:
    e = fails(check_parts, channel, parts)
    assert e.field == field


def test_source_size_limits() -> None:
    e = fails(check_parts, INBOX, {"title": "t", "body": "x" * (MAX_PART_CHARS + 1)})
    assert e.reason is TemplateFailure.TOO_LARGE
    assert e.field == "body"
    big = "x" * (MAX_PART_CHARS - 10)
    e = fails(check_parts, INBOX, {"title": big, "body": big, "html": big})
    assert e.reason is TemplateFailure.TOO_LARGE
    assert str(MAX_SOURCE_BYTES) in e.message


def test_variables_are_listed() -> None:
    compiled = compile_parts(
        PUSH,
        {
            "title": "{{ a }}",
            "body": "{% for x in items %}{{ x }}{% endfor %}",
            "data": {"k": "{{ b.c }}"},
        },
    )
    assert compiled.variables == ("a", "b", "items")


def test_content_hash_ignores_key_order_only() -> None:
    assert content_hash({"title": "a", "body": "b"}) == content_hash({"body": "b", "title": "a"})
    assert content_hash({"title": "a", "body": "b"}) != content_hash({"title": "a", "body": "b "})


def test_template_ids_round_trip() -> None:
    key = TemplateKey.parse("order.paid", "push", "pt_br")
    assert key.locale == "pt-BR"
    assert template_id(key, 3) == "order.paid:push:pt-BR:3"
    assert parse_template_id("order.paid:push:pt-BR:3") == (key, 3)
    with pytest.raises(DomainError):
        parse_template_id("order.paid:push:pt-BR")


# --- locales


@pytest.mark.parametrize(
    ("tag", "canonical"),
    [
        ("en", "en"),
        ("pt-br", "pt-BR"),
        ("PT_BR", "pt-BR"),
        ("zh-hant-tw", "zh-Hant-TW"),
        ("es-419", "es-419"),
    ],
)
def test_canonical_locales(tag: str, canonical: str) -> None:
    assert canonical_locale(tag) == canonical


@pytest.mark.parametrize("tag", ["", "english", "p", "pt-BRA", "pt--BR", "en-US-x", 3])
def test_bad_locales(tag: object) -> None:
    with pytest.raises(DomainError):
        canonical_locale(tag)


@pytest.mark.parametrize(
    ("locale", "chain"),
    [
        ("pt-BR", ["pt-BR", "pt", "en"]),
        ("pt_br", ["pt-BR", "pt", "en"]),
        ("pt", ["pt", "en"]),
        ("en-US", ["en-US", "en"]),
        ("zh-Hant-TW", ["zh-Hant-TW", "zh-Hant", "zh", "en"]),
        ("en-US-u-ca-gregory", ["en-US", "en"]),
        ("klingon!", ["en"]),
        (None, ["en"]),
    ],
)
def test_fallback_chain(locale: str | None, chain: list[str]) -> None:
    assert fallback_chain(locale, "en") == chain


# --- properties: whatever the source and data, a TemplateError or a result, nothing else

_JINJA_BITS = st.sampled_from(
    [
        "{{",
        "}}",
        "{%",
        "%}",
        "{#",
        "#}",
        " if ",
        " for ",
        " in ",
        "endif",
        "endfor",
        "x",
        "|",
        "upper",
        "(",
        ")",
        "'",
        '"',
        "*",
        "**",
        "%",
        "range",
        ".",
        "__class__",
        "\n",
        "9",
        "set",
        "=",
    ]
)
SOURCES = st.one_of(st.text(max_size=200), st.lists(_JINJA_BITS, max_size=30).map("".join))
DATA = st.dictionaries(
    st.sampled_from(["x", "name", "order", "items"]),
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(max_size=20),
        lambda inner: (
            st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
        ),
        max_leaves=6,
    ),
)


@settings(max_examples=300, deadline=None)
@given(title=SOURCES, body=SOURCES, html=SOURCES, data=DATA)
def test_any_source_and_data_give_a_render_or_a_template_error(
    title: str, body: str, html: str, data: dict[str, Any]
) -> None:
    for channel, parts in (
        (PUSH, {"title": title, "body": body, "data": {"k": html}}),
        (INBOX, {"title": title, "body": body, "html": html}),
    ):
        try:
            checked = check_parts(channel, parts)
            rendered = render(compile_parts(channel, checked), data)
        except TemplateError as e:
            assert e.field
            continue
        json.dumps(rendered.as_dict(), ensure_ascii=False).encode()


def test_a_render_stops_at_its_time_limit() -> None:
    """Checked at every step, so no template holds its worker thread past the limit."""
    compiled = compile_parts(
        PUSH,
        check_parts(PUSH, {"title": "{% for i in range(9) %}{{ i }}{% endfor %}", "body": "b"}),
    )
    assert render(compiled, {}).title == "012345678"
    e = fails(render, compiled, {}, seconds=-1.0)
    assert e.field == "title" and "took over -1 s" in e.message


@pytest.mark.parametrize(
    "source",
    [
        "{{ a" + ".b" * 2500 + " }}",
        "{{ a" + " | e" * 2000 + " }}",
        "{{ 1" + " + 1" * 2000 + " }}",
        "{{ " + "(" * 3000 + "1" + ")" * 3000 + " }}",
    ],
)
def test_a_deeply_nested_source_is_refused_at_save_never_a_recursion_error(source: str) -> None:
    e = fails(check_parts, PUSH, {"title": "t", "body": source})
    assert (e.field, e.reason) == ("body", TemplateFailure.COMPILE_ERROR)


def test_ordinary_uses_of_the_bounded_filters_still_work() -> None:
    got = push(
        {"items": ["a", "b"], "text": "one two"},
        title="{{ items | join(', ') }} {{ ', '.join(items) }}",
        body="{{ text | indent(2, true) }}|{{ '%-4s|%.1f' % ('x', 2.25) }}|{{ 'a' ~ (1 + 2) }}"
        "|{{ [1, 2] + [3] }}|{{ items | sum(start=0) if false else text | wordwrap(3) }}",
    )
    assert got["title"] == "a, b a, b"
    assert got["body"] == "  one two|x   |2.2|a3|[1, 2, 3]|one\ntwo"
