"""The app at work (tepat/app_context.py) labels what the metrics observe: inside
``app_context("b")`` and in every task created there, ``app="b"``; elsewhere the default."""

from __future__ import annotations

import asyncio

import pytest

from tepat import metrics
from tepat.app_context import app_context, current_app
from tepat.domain.apps import DEFAULT_APP
from tepat.ports.try_again import TryAgain

CATEGORY = "app-context-test"  # a category of its own: other tests' series stay apart


def lateness_count(app: str) -> float:
    labels = {"app": app, "channel": "sms", "category": CATEGORY}
    return metrics.REGISTRY.get_sample_value("tepat_send_lateness_seconds_count", labels) or 0.0


def throttled(app: str) -> float:
    labels = {
        "app": app,
        "channel": "sms",
        "provider": "twilio",
        "kind": "throttled",
        "code": "twilio_20429",
    }
    return metrics.REGISTRY.get_sample_value("tepat_provider_errors_total", labels) or 0.0


def reserve_used(app: str) -> float:
    labels = {"app": app, "provider": "app-context-test"}
    return metrics.REGISTRY.get_sample_value("tepat_critical_reserve_used_total", labels) or 0.0


def figures() -> dict[str, float]:
    return {
        f"{name} {app}": read(app)
        for app in (DEFAULT_APP, "b")
        for name, read in (("late", lateness_count), ("429", throttled), ("reserve", reserve_used))
    }


def observe() -> None:
    metrics.observe_lateness("sms", CATEGORY, 0.3)
    metrics.count_provider_error("sms", TryAgain("twilio_20429: slow down", throttled=True))
    metrics.count_reserve_used("app-context-test", 2)


def moved(before: dict[str, float]) -> dict[str, float]:
    return {k: v - before[k] for k, v in figures().items() if v != before[k]}


def test_outside_any_app_the_default_app_is_at_work() -> None:
    before = figures()
    assert current_app() == DEFAULT_APP
    observe()
    assert moved(before) == {"late default": 1, "429 default": 1, "reserve default": 2}


def test_inside_app_context_observations_carry_its_app_and_leaving_restores_the_default() -> None:
    before = figures()
    with app_context("b"):
        assert current_app() == "b"
        observe()
    assert current_app() == DEFAULT_APP
    assert moved(before) == {"late b": 1, "429 b": 1, "reserve b": 2}


async def test_a_task_created_inside_the_context_works_for_its_app_after_the_block() -> None:
    before = figures()
    go = asyncio.Event()

    async def loop() -> str:
        await go.wait()  # observes once the creating block has been left
        observe()
        return current_app()

    with app_context("b"):
        task = asyncio.create_task(loop())
    observe()  # the creator, back outside: the default app
    go.set()
    assert await task == "b"
    assert moved(before) == {
        "late b": 1,
        "429 b": 1,
        "reserve b": 2,
        "late default": 1,
        "429 default": 1,
        "reserve default": 2,
    }


async def test_two_apps_tasks_side_by_side_keep_their_own_app() -> None:
    async def app_loop() -> list[str]:
        seen = []
        for _ in range(3):
            seen.append(current_app())
            await asyncio.sleep(0)  # hand over to the other app's task
        return seen

    with app_context("a"):
        a = asyncio.create_task(app_loop())
    with app_context("b"):
        b = asyncio.create_task(app_loop())
    assert await a == ["a"] * 3
    assert await b == ["b"] * 3


@pytest.mark.parametrize("app_id", ["", "B", "1app", "a" * 40, 'x"}', "default\n"])
def test_only_an_app_id_becomes_the_label(app_id: str) -> None:
    with pytest.raises(ValueError, match="not an app id"), app_context(app_id):
        pass
    assert current_app() == DEFAULT_APP
