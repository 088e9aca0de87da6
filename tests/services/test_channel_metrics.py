"""Every channel on the operator's screen: each answer of the outcome table, sent through
the real send path (tests/services/test_outcome_table.py), is counted once under its own
channel and provider: a push, an inbox message, an e-mail, an SMS and a webhook alike."""

from __future__ import annotations

import pytest

from tepat import metrics
from tepat.domain.apps import DEFAULT_APP
from tepat.domain.models import MessageStatus
from tepat.ports.channel import Refused
from tepat.runtime import Runtime
from tests.services.test_outcome_table import (
    CASES,
    ONE_NOTIFICATION,
    TABLE,
    Row,
    for_one_notification,
    send_once,
)
from tests.services.test_outcome_table import rt as rt  # the fixture: a runtime with ana

# What each answer is counted as in tepat_sends_total, and the provider error it is
# counted as in tepat_provider_errors_total ((kind, code); None: not an error). Push
# answers a refusal as a whole request `Rejected`.
COUNTED: dict[str, tuple[str | None, tuple[str, str] | None]] = {
    "accepted": ("sent", None),
    "delivered": ("delivered", None),
    "refused": ("failed", ("refused", "refused")),
    "try again": ("retry", ("try_again", "503")),
    "try again after Retry-After": ("retry", ("throttled", "429")),
    "try again, given up": ("gave_up", ("try_again", "503")),
    "5xx the provider says to retry, category closes": ("retry", ("try_again", "500")),
    "maybe sent, category closes": ("outcome_unknown", ("try_again", "read")),
    "maybe sent, category retries": ("retry", ("try_again", "read")),
    "crash after send": (None, None),
}
NOT_SENT = {"try again", "try again after Retry-After", "try again, given up"}
# One notification's own TryAgain is counted as a whole request's would be.
COUNTED.update({for_one_notification(n): COUNTED[n] for n in ONE_NOTIFICATION})
NOT_SENT.update(for_one_notification(n) for n in ONE_NOTIFICATION if n in NOT_SENT)


def sample(name: str, **labels: str) -> float:
    return metrics.REGISTRY.get_sample_value(name, labels) or 0.0


def every(name: str) -> float:
    return sum(s.value for f in metrics.REGISTRY.collect() for s in f.samples if s.name == name)


@pytest.mark.parametrize(("name", "channel"), CASES)
async def test_each_answer_is_counted_once_under_its_own_channel_and_provider(
    rt: Runtime, name: str, channel: str
) -> None:
    row = TABLE[name]
    outcome, error = COUNTED[name]
    if channel in row.unlike:  # a maybe-sent webhook is retried
        outcome = "retry"
    if channel == "push" and error is not None and error[0] == "refused":
        error = ("refused", "Rejected")
    provider = metrics.PROVIDERS[channel]
    sends = {
        "app": DEFAULT_APP,
        "channel": channel,
        "provider": provider,
        "outcome": outcome or "none",
    }
    errors = {
        "app": DEFAULT_APP,
        "channel": channel,
        "provider": provider,
        "kind": "-",
        "code": "-",
    }
    if error is not None:
        errors["kind"], errors["code"] = error
    retries = {"channel": channel, "category": row.category}
    lateness = {"app": DEFAULT_APP, "channel": channel, "category": row.category}
    before = (
        sample("tepat_sends_total", **sends),
        every("tepat_sends_total"),
        sample("tepat_provider_errors_total", **errors),
        every("tepat_provider_errors_total"),
        sample("tepat_not_sent_retries_total", **retries),
        sample("tepat_send_lateness_seconds_count", **lateness),
    )
    await send_once(rt, name, channel)

    counted = 0 if outcome is None else 1
    assert (
        sample("tepat_sends_total", **sends) - before[0],
        every("tepat_sends_total") - before[1],
        sample("tepat_provider_errors_total", **errors) - before[2],
        every("tepat_provider_errors_total") - before[3],
        sample("tepat_not_sent_retries_total", **retries) - before[4],
        sample("tepat_send_lateness_seconds_count", **lateness) - before[5],
    ) == (
        counted,
        counted,
        int(error is not None),
        int(error is not None),
        int(name in NOT_SENT),
        int(outcome in ("sent", "delivered")),
    )


async def test_a_refusal_naming_a_dead_target_counts_as_suppressed(
    rt: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    row = Row(Refused("smtp_550", suppress="hard_bounce"), (MessageStatus.FAILED, None, 0))
    monkeypatch.setitem(TABLE, "hard bounce", row)
    labels = {"app": DEFAULT_APP, "channel": "email", "provider": "smtp", "outcome": "suppressed"}
    before = sample("tepat_sends_total", **labels)
    await send_once(rt, "hard bounce", "email")
    assert sample("tepat_sends_total", **labels) - before == 1
