"""Pinning: a message carries the template version it was created with, and renders
that version at send time, whatever was saved since (issue 12)."""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from tepat.clock import FakeClock
from tepat.domain.categories import Categories
from tepat.domain.routing import Channel, default_event_types
from tepat.domain.templates import TemplateError, TemplateFailure
from tepat.ports.store import Store
from tepat.services.accounts import NotFound
from tepat.services.templates import TemplateService
from tests.support.store_factories import STORE_FACTORIES

START = datetime(2027, 3, 1, 9, 0, tzinfo=UTC)


@pytest.fixture(params=sorted(STORE_FACTORIES))
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store]:
    async with STORE_FACTORIES[request.param](tmp_path) as s:
        yield s


@pytest.fixture
def service(store: Store) -> TemplateService:
    return TemplateService(store, default_event_types(Categories()), FakeClock(START), "en")


async def save(service: TemplateService, locale: str, title: str, channel: str = "push") -> int:
    template, _ = await service.put(
        service.key("order.paid", channel, locale), {"title": title, "body": "#{{ order_id }}"}
    )
    return template.version


async def test_an_edit_after_pinning_leaves_the_pinned_render_unchanged(
    service: TemplateService, store: Store
) -> None:
    await save(service, "en", "Paid")
    pinned = await service.resolve("order.paid", Channel.PUSH, "en-GB")
    assert pinned is not None
    assert (pinned.template_id, pinned.locale, pinned.version) == ("order.paid:push:en:1", "en", 1)
    first = await service.render_pinned(pinned.template_id, {"order_id": 8841})

    assert await save(service, "en", "Payment received") == 2  # the edit

    # a retry, by a fresh service (another process, empty cache), renders the pinned text
    other = TemplateService(store, default_event_types(Categories()), FakeClock(START), "en")
    again = await other.render_pinned(pinned.template_id, {"order_id": 8841})
    assert again == first
    assert again.title == "Paid"
    # while a new message pins the new version
    latest = await service.resolve("order.paid", Channel.PUSH, "en-GB")
    assert latest is not None
    assert latest.version == 2
    assert (await service.render_pinned(latest.template_id, {"order_id": 1})).title == (
        "Payment received"
    )


async def test_locale_fallback_region_then_language_then_default(service: TemplateService) -> None:
    assert await service.resolve("order.paid", Channel.PUSH, "pt-BR") is None
    await save(service, "en", "Paid")
    en = await service.resolve("order.paid", Channel.PUSH, "pt-BR")
    assert en is not None
    assert en.locale == "en"
    await save(service, "pt", "Pago")
    pt = await service.resolve("order.paid", Channel.PUSH, "pt-BR")
    assert pt is not None
    assert pt.locale == "pt"
    await save(service, "pt-BR", "Pago (BR)")
    br = await service.resolve("order.paid", Channel.PUSH, "pt_br")
    assert br is not None
    assert (br.locale, br.template_id) == ("pt-BR", "order.paid:push:pt-BR:1")
    pt_pt = await service.resolve("order.paid", Channel.PUSH, "pt-PT")
    assert pt_pt is not None
    assert pt_pt.locale == "pt"
    # channels are looked up apart
    assert await service.resolve("order.paid", Channel.INBOX, "pt-BR") is None


async def test_a_pinned_render_that_misses_data_is_a_render_error(
    service: TemplateService,
) -> None:
    await save(service, "en", "Paid")
    pinned = await service.resolve("order.paid", Channel.PUSH, "en")
    assert pinned is not None
    with pytest.raises(TemplateError) as e:
        await service.render_pinned(pinned.template_id, {})
    assert e.value.reason is TemplateFailure.RENDER_ERROR
    assert e.value.variable == "order_id"


async def test_a_pinned_id_that_names_nothing_is_not_found(service: TemplateService) -> None:
    with pytest.raises(NotFound):
        await service.render_pinned("order.paid:push:en:7", {})


class _WhereRendered:
    """A data value that notes the thread it is printed on."""

    def __init__(self) -> None:
        self.threads: list[str] = []

    def __str__(self) -> str:
        self.threads.append(threading.current_thread().name)
        return "x"


async def test_renders_run_on_a_worker_thread_never_on_the_event_loop(
    service: TemplateService,
) -> None:
    """A render at its limits takes up to a second: the API must keep answering meanwhile."""
    await save(service, "en", "Paid")
    value = _WhereRendered()
    await service.render_pinned("order.paid:push:en:1", {"order_id": value})
    await service.preview_inline(
        "order.paid", "push", "en", {"title": "t", "body": "{{ v }}"}, {"v": value}
    )
    assert len(value.threads) == 2
    assert threading.main_thread().name not in value.threads
    assert all(name.startswith("tepat-render") for name in value.threads)
