"""Push is counted per provider: each device's answer under its kind's name
(``tepat_push_sends_total``), and each provider error under the provider that answered it
(``tepat_provider_errors_total``), through the real send path with an Expo and an FCM
fake (the runtime of tests/services/test_push_kinds.py)."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from tepat import metrics
from tepat.domain.apps import DEFAULT_APP
from tepat.ports.push import PushRequest, SendResult, TicketError, Tickets
from tepat.ports.try_again import TryAgain
from tepat.runtime import Runtime
from tests.services.test_push_kinds import FakeFcm, send
from tests.services.test_push_kinds import expo as expo  # fixtures
from tests.services.test_push_kinds import rt as rt


class ThrottlingFcm(FakeFcm):
    """Answers a whole request with a 429 while ``throttle`` is set, and each notification
    with its own ``unavailable`` when that is set (one request per notification, as FCM)."""

    throttle = False
    unavailable: TryAgain | None = None

    async def send(self, batch: Sequence[PushRequest]) -> SendResult:
        if self.throttle:
            return TryAgain("429: quota exceeded", retry_after=1.0, throttled=True)
        if self.unavailable is not None:
            return Tickets([self.unavailable] * len(batch))
        return await super().send(batch)


@pytest.fixture
def fcm() -> ThrottlingFcm:
    return ThrottlingFcm()


def sends(provider: str, outcome: str) -> float:
    labels = {"app": DEFAULT_APP, "provider": provider, "outcome": outcome}
    return metrics.REGISTRY.get_sample_value("tepat_push_sends_total", labels) or 0.0


def errors(provider: str, kind: str, code: str) -> float:
    labels = {
        "app": DEFAULT_APP,
        "channel": "push",
        "provider": provider,
        "kind": kind,
        "code": code,
    }
    return metrics.REGISTRY.get_sample_value("tepat_provider_errors_total", labels) or 0.0


def figures() -> dict[str, float]:
    """Every per-provider figure these tests move."""
    return {
        "expo accepted": sends("expo", "accepted"),
        "expo throttled": sends("expo", "throttled"),
        "fcm accepted": sends("fcm", "accepted"),
        "fcm throttled": sends("fcm", "throttled"),
        "fcm refused": sends("fcm", "refused"),
        "fcm 429": errors("fcm", "throttled", "429"),
        "expo 429": errors("expo", "throttled", "429"),
        "fcm UNREGISTERED": errors("fcm", "refused", "UNREGISTERED"),
        "fcm 503": errors("fcm", "try_again", "503"),
        "expo 503": errors("expo", "try_again", "503"),
        "expo UNREGISTERED": errors("expo", "refused", "UNREGISTERED"),
    }


def moved(before: dict[str, float]) -> dict[str, float]:
    return {k: v - before[k] for k, v in figures().items() if v != before[k]}


async def test_each_provider_counts_its_own_sends(rt: Runtime) -> None:
    before = figures()
    await send(rt)
    assert moved(before) == {"expo accepted": 1, "fcm accepted": 1}


async def test_a_429_counts_under_the_provider_that_answered_it(
    rt: Runtime, fcm: ThrottlingFcm
) -> None:
    fcm.throttle = True
    before = figures()
    await send(rt)
    assert moved(before) == {"expo accepted": 1, "fcm throttled": 1, "fcm 429": 1}


async def test_a_refusal_counts_under_the_provider_that_refused(
    rt: Runtime, fcm: ThrottlingFcm
) -> None:
    fcm.refuse_with = TicketError("UNREGISTERED", "gone", permanent=True, deactivate_device=True)
    before = figures()
    await send(rt)
    assert moved(before) == {"expo accepted": 1, "fcm refused": 1, "fcm UNREGISTERED": 1}


async def test_one_notifications_own_failure_counts_under_the_provider_that_answered_it(
    rt: Runtime, fcm: ThrottlingFcm
) -> None:
    fcm.unavailable = TryAgain("503: UNAVAILABLE", retry_after=10.0, server_error=True)
    before = figures()
    await send(rt)
    assert moved(before) == {"expo accepted": 1, "fcm 503": 1}
