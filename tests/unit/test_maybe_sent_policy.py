"""The per-category maybe-sent policy: defaults, TEPAT_CATEGORIES, and its metrics."""

from __future__ import annotations

import json

import pytest
from prometheus_client import generate_latest

from tepat import metrics
from tepat.config import ConfigError, load_settings
from tepat.domain.categories import (
    DEFAULT_CATEGORIES,
    Categories,
    MaybeSentPolicy,
    default_maybe_sent,
)
from tepat.domain.models import MessageStatus
from tepat.domain.outcomes import Next
from tepat.ports.try_again import TryAgain


def test_safety_retries_a_maybe_sent_message_and_every_other_default_closes_it() -> None:
    policies = {p.name: p.maybe_sent for p in Categories(DEFAULT_CATEGORIES)}
    assert policies.pop("safety") is MaybeSentPolicy.RETRY
    assert set(policies.values()) == {MaybeSentPolicy.CLOSE}


def test_maybe_sent_is_configured_per_category_through_tepat_categories(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(
        "TEPAT_CATEGORIES",
        json.dumps({"safety": {"maybe_sent": "close"}, "meal": {"maybe_sent": "retry"}}),
    )
    categories = load_settings().category_policies()
    assert categories.get("safety").maybe_sent is MaybeSentPolicy.CLOSE
    assert categories.get("meal").maybe_sent is MaybeSentPolicy.RETRY


def test_a_configured_category_without_maybe_sent_keeps_the_built_in_default(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Redefining safety for its queue must not quietly stop retrying its messages.
    monkeypatch.setenv(
        "TEPAT_CATEGORIES",
        json.dumps({"safety": {"queue": "q.safety"}, "meal": {}, "billing": {}}),
    )
    categories = load_settings().category_policies()
    assert [categories.get(n).maybe_sent for n in ("safety", "meal", "billing")] == [
        MaybeSentPolicy.RETRY,
        MaybeSentPolicy.CLOSE,
        MaybeSentPolicy.CLOSE,
    ]
    assert default_maybe_sent("billing") is MaybeSentPolicy.CLOSE


@pytest.mark.parametrize(
    ("setting", "named"),
    [
        ({"safety": {"maybe_sent": "sometimes"}}, "TEPAT_CATEGORIES: safety.maybe_sent: "),
        ({"meal": {"maybe_sent": 1}}, "TEPAT_CATEGORIES: meal.maybe_sent: "),
        ({"meal": {"missed_window_minutes": 0}}, "TEPAT_CATEGORIES: meal.missed_window_minutes: "),
    ],
)
def test_a_bad_category_policy_stops_the_process_naming_the_field(
    monkeypatch: pytest.MonkeyPatch, setting: dict[str, object], named: str
) -> None:
    monkeypatch.setenv("TEPAT_CATEGORIES", json.dumps(setting))
    with pytest.raises(ConfigError) as e:
        load_settings()
    assert str(e.value).startswith(f"tepat: bad configuration: {named}")


def test_maybe_sent_and_not_sent_counters_are_exposed_by_category() -> None:
    metrics.count_maybe_sent("meal", "closed")
    metrics.count_maybe_sent("safety", "retried")
    metrics.count_answer("sms", "meal", TryAgain("twilio_20429"), Next(MessageStatus.PENDING))
    exposed = generate_latest(metrics.REGISTRY).decode()
    assert 'tepat_maybe_sent_total{action="closed",category="meal"}' in exposed
    assert 'tepat_maybe_sent_total{action="retried",category="safety"}' in exposed
    assert 'tepat_not_sent_retries_total{category="meal",channel="sms"}' in exposed
