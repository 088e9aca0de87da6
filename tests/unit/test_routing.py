"""Event-type routing: TEPAT_EVENT_TYPES parsing, the default set, route conditions."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tepat.config import ConfigError, load_settings
from tepat.domain.categories import Categories, CategoryPolicy
from tepat.domain.errors import DomainError
from tepat.domain.routing import (
    Channel,
    Condition,
    Priority,
    Route,
    check_event_type_name,
    default_event_types,
    parse_channel,
    parse_event_types,
    select_channels,
)

CATEGORIES = Categories()


def one(**spec: Any) -> dict[str, Any]:
    base: dict[str, Any] = {"category": "custom", "channels": [{"channel": "inbox"}]}
    base.update(spec)
    return {"order.paid": base}


def test_a_full_event_type_is_read_with_its_routes_in_order() -> None:
    types = parse_event_types(
        one(
            priority="critical",
            channels=[
                {"channel": "inbox", "when": "always"},
                {"channel": "push", "when": "active_device"},
            ],
        ),
        CATEGORIES,
    )
    t = types.get("order.paid")
    assert t.category == "custom"
    assert t.priority is Priority.CRITICAL
    assert t.routes == (Route(Channel.INBOX), Route(Channel.PUSH, Condition.ACTIVE_DEVICE))
    assert t.channels == (Channel.INBOX, Channel.PUSH)


def test_priority_and_condition_have_defaults() -> None:
    t = parse_event_types(one(), CATEGORIES).get("order.paid")
    assert t.priority is Priority.NORMAL
    assert t.routes == (Route(Channel.INBOX, Condition.ALWAYS),)


@pytest.mark.parametrize(
    ("raw", "field", "words"),
    [
        ({"Order.Paid": {}}, "Order.Paid", "lower-case dotted"),
        ({"orderpaid": {}}, "orderpaid", "lower-case dotted"),
        ({"order..paid": {}}, "order..paid", "lower-case dotted"),
        ({"order.paid": []}, "order.paid", "expected an object"),
        (one(category="billing"), "order.paid.category", "configured category"),
        (one(priority="urgent"), "order.paid.priority", "critical, normal or bulk"),
        (one(channels=[]), "order.paid.channels", "1 to 8"),
        (one(chanels=[]), "order.paid.chanels", "unknown key"),
        (one(channels=[{"channel": "fax"}]), "order.paid.channels[0].channel", "unknown channel"),
        (
            one(channels=[{"channel": "inbox"}, {"channel": "email"}]),
            "order.paid.channels[1].channel",
            "no provider configured",
        ),
        (
            one(channels=[{"channel": "sms"}]),
            "order.paid.channels[0].channel",
            "no provider configured",
        ),
        (
            one(channels=[{"channel": "push"}, {"channel": "push"}]),
            "order.paid.channels[1].channel",
            "routed twice",
        ),
        (
            one(channels=[{"channel": "push", "when": "sometimes"}]),
            "order.paid.channels[0].when",
            "always, active_device or fallback",
        ),
        (one(channels=[{"channel": "push", "if": "x"}]), "order.paid.channels[0].if", "unknown"),
    ],
)
def test_bad_event_types_are_refused_naming_the_place(
    raw: dict[str, Any], field: str, words: str
) -> None:
    with pytest.raises(DomainError) as e:
        parse_event_types(raw, CATEGORIES)
    assert e.value.field == field
    assert words in e.value.message


def test_email_and_sms_are_routable_only_with_their_provider() -> None:
    from tepat.domain.routing import ALWAYS_ENABLED

    assert parse_channel("email") is Channel.EMAIL  # a template may name it
    with pytest.raises(DomainError, match="no provider configured"):
        parse_channel("email", enabled=ALWAYS_ENABLED)
    with pytest.raises(DomainError, match="unknown channel"):
        parse_channel("fax")


@pytest.mark.parametrize("name", ["order.paid", "invoice.overdue", "otp.requested", "a.b_c.d9"])
def test_event_type_names(name: str) -> None:
    assert check_event_type_name(name) == name


@pytest.mark.parametrize("name", ["order", "order.", ".paid", "order.Paid", "9a.b", "a.b-c", ""])
def test_bad_event_type_names(name: str) -> None:
    with pytest.raises(DomainError):
        check_event_type_name(name)


def test_unknown_event_type_lists_the_configured_ones() -> None:
    with pytest.raises(DomainError) as e:
        default_event_types(CATEGORIES).get("order.refunded")
    assert e.value.field == "type"
    assert "order.paid" in e.value.message


def test_default_set_drops_types_whose_category_is_not_configured() -> None:
    assert default_event_types(CATEGORIES).names == [
        "invoice.overdue",
        "order.paid",
        "otp.requested",
    ]
    only_safety = Categories([CategoryPolicy("safety")])
    assert default_event_types(only_safety).names == ["otp.requested"]


def test_otp_is_critical() -> None:
    assert default_event_types(CATEGORIES).get("otp.requested").priority is Priority.CRITICAL


@pytest.mark.parametrize(
    ("routes", "has_device", "expected"),
    [
        (
            [Route(Channel.INBOX), Route(Channel.PUSH, Condition.ACTIVE_DEVICE)],
            True,
            ["inbox", "push"],
        ),
        ([Route(Channel.INBOX), Route(Channel.PUSH, Condition.ACTIVE_DEVICE)], False, ["inbox"]),
        (
            [
                Route(Channel.PUSH, Condition.ACTIVE_DEVICE),
                Route(Channel.INBOX, Condition.FALLBACK),
            ],
            True,
            ["push"],
        ),
        (
            [
                Route(Channel.PUSH, Condition.ACTIVE_DEVICE),
                Route(Channel.INBOX, Condition.FALLBACK),
            ],
            False,
            ["inbox"],
        ),
        ([Route(Channel.PUSH, Condition.ACTIVE_DEVICE)], False, []),
    ],
)
def test_route_conditions(routes: list[Route], has_device: bool, expected: list[str]) -> None:
    assert select_channels(routes, has_active_device=has_device) == expected


# --- through the settings: a bad value stops the process with one line naming it


def test_settings_read_event_types_from_json(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TEPAT_EVENT_TYPES", json.dumps(one()))
    assert load_settings().event_routing().names == ["order.paid"]


def test_settings_default_event_types_when_unset(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TEPAT_EVENT_TYPES", raising=False)
    assert "otp.requested" in load_settings().event_routing()


@pytest.mark.parametrize(
    ("value", "words"),
    [
        ("not json", "expected a JSON object of event types"),
        (json.dumps(one(category="billing")), "order.paid.category: expected a configured"),
        (json.dumps(one(channels=[{"channel": "email"}])), "order.paid.channels[0].channel"),
    ],
)
def test_bad_event_types_setting_stops_with_one_line(
    monkeypatch: pytest.MonkeyPatch, value: str, words: str
) -> None:
    monkeypatch.setenv("TEPAT_EVENT_TYPES", value)
    with pytest.raises(ConfigError) as e:
        load_settings()
    line = str(e.value)
    assert "\n" not in line
    assert line.startswith("tepat: bad configuration: TEPAT_EVENT_TYPES: ")
    assert words in line


def test_email_and_sms_routes_are_taken_once_their_provider_is_configured(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    routes = one(channels=[{"channel": "inbox"}, {"channel": "sms"}, {"channel": "email"}])
    monkeypatch.setenv("TEPAT_EVENT_TYPES", json.dumps(routes))
    monkeypatch.setenv("TEPAT_TWILIO_ACCOUNT_SID", "AC" + "a" * 32)
    monkeypatch.setenv("TEPAT_TWILIO_AUTH_TOKEN", "t" * 32)
    monkeypatch.setenv("TEPAT_TWILIO_FROM", "+15005550006")
    monkeypatch.setenv("TEPAT_PUBLIC_URL", "https://tepat.example")
    with pytest.raises(ConfigError, match=r"channels\[2\]\.channel: channel 'email' has no"):
        load_settings()  # SMS is configured, e-mail is not
    monkeypatch.setenv("TEPAT_SMTP_HOST", "smtp.example")
    monkeypatch.setenv("TEPAT_SMTP_FROM", "Tepat <no-reply@tepat.example>")
    monkeypatch.setenv("TEPAT_UNSUBSCRIBE_SECRET", "u" * 32)
    got = load_settings().event_routing().get("order.paid").routes
    assert [r.channel for r in got] == [Channel.INBOX, Channel.SMS, Channel.EMAIL]


def test_event_types_follow_the_configured_categories(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TEPAT_CATEGORIES", json.dumps({"billing": {}}))
    monkeypatch.setenv("TEPAT_EVENT_TYPES", json.dumps(one(category="billing")))
    assert load_settings().event_routing().get("order.paid").category == "billing"
    # TEPAT_CATEGORIES is merged over the seven defaults (issue 19): the default event
    # types keep their built-in categories beside the new one
    monkeypatch.delenv("TEPAT_EVENT_TYPES")
    settings = load_settings()
    routing = settings.event_routing()
    assert len(routing) > 0
    assert "billing" in settings.category_policies()
    assert all(t.category in settings.category_policies() for t in routing)


def test_default_locale_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TEPAT_DEFAULT_LOCALE", "pt_br")
    assert load_settings().default_locale == "pt-BR"
    monkeypatch.setenv("TEPAT_DEFAULT_LOCALE", "portuguese")
    with pytest.raises(ConfigError, match="TEPAT_DEFAULT_LOCALE"):
        load_settings()
