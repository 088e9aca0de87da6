"""The channel metrics' labels stay bounded: a channel, its provider, an outcome, a kind
and the provider's code, never an address, a number or a message id from a reason."""

from __future__ import annotations

import pytest
from prometheus_client.metrics import MetricWrapperBase

from tepat import metrics
from tepat.domain.apps import DEFAULT_APP
from tepat.ports.channel import Refused
from tepat.ports.push import Rejected, TicketError
from tepat.ports.try_again import TryAgain

# Label names that would make a series per user or per message.
UNBOUNDED = {"user", "user_id", "message", "message_id", "target", "device", "token", "reason"}


def test_no_metric_is_labelled_by_user_message_or_target() -> None:
    families = [v for v in vars(metrics).values() if isinstance(v, MetricWrapperBase)]
    assert families
    for family in families:
        assert not set(family._labelnames) & UNBOUNDED, family


@pytest.mark.parametrize(
    ("reason", "code"),
    [
        ("twilio_20429: Too Many Requests for +447700900123", "twilio_20429"),
        ("smtp_550", "smtp_550"),
        ("HTTP_503: Service Unavailable", "HTTP_503"),
        ("url_refused: 10.0.0.7 is internal", "url_refused"),
        ("timeout talking to Expo after the request was sent: ReadTimeout: ...", "timeout"),
        ("render_error: 'name' is undefined", "render_error"),
        (" leading space", "unknown"),
        ("x" * 100, "x" * 40),
    ],
)
def test_a_code_is_the_leading_word_of_the_reason(reason: str, code: str) -> None:
    assert metrics.error_code(reason) == code


def series() -> set[tuple[str, ...]]:
    """The label sets of tepat_provider_errors_total's series."""
    return {
        tuple(sorted(sample.labels.values()))
        for family in metrics.REGISTRY.collect()
        for sample in family.samples
        if sample.name == "tepat_provider_errors_total"
    }


def test_provider_errors_with_distinct_free_text_share_one_series() -> None:
    throttled = {
        "app": DEFAULT_APP,
        "channel": "sms",
        "provider": "twilio",
        "kind": "throttled",
        "code": "twilio_20429",
    }
    before = series()
    counted = metrics.REGISTRY.get_sample_value("tepat_provider_errors_total", throttled) or 0
    for n in range(50):
        metrics.count_provider_error("email", Refused(f"smtp_550 5.1.1 <user{n}@example.com>"))
        too_many = TryAgain(f"twilio_20429: to +4477009{n:05}", throttled=True)
        metrics.count_provider_error("sms", too_many)
    refused = {
        "app": DEFAULT_APP,
        "channel": "email",
        "provider": "smtp",
        "kind": "refused",
        "code": "smtp_550",
    }
    expected = {tuple(sorted(refused.values())), tuple(sorted(throttled.values()))}
    assert expected <= series()
    assert series() - before <= expected
    after = metrics.REGISTRY.get_sample_value("tepat_provider_errors_total", throttled)
    assert after == counted + 50


def test_push_errors_keep_expo_codes_and_name_a_refused_request_rejected() -> None:
    metrics.count_provider_error("push", TicketError("DeviceNotRegistered", "gone", True))
    metrics.count_provider_error("push", Rejected("HTTP_401: bad token"))
    for kind, code in (("refused", "DeviceNotRegistered"), ("refused", "Rejected")):
        labels = {
            "app": DEFAULT_APP,
            "channel": "push",
            "provider": "expo",
            "kind": kind,
            "code": code,
        }
        assert (metrics.REGISTRY.get_sample_value("tepat_provider_errors_total", labels) or 0) >= 1
