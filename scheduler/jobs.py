"""The scheduler process: run the creator job and the sweeper on their intervals."""

from __future__ import annotations

import asyncio

import structlog

from tepat.domain.zones import TZDATA_RELEASE
from tepat.loops import wait_or_stop
from tepat.runtime import Runtime, event_service

log = structlog.get_logger("tepat.scheduler")


async def run_creator(rt: Runtime, stop: asyncio.Event) -> None:
    replanned = await rt.creator.replan_if_tzdata_changed(TZDATA_RELEASE)
    if replanned is not None:
        log.warning(
            "tz database release changed: re-planned",
            release=TZDATA_RELEASE,
            cancelled=replanned.cancelled,
            created=replanned.created,
        )
    while not stop.is_set():
        try:
            result = await rt.creator.plan_ahead()
            log.info("planned", created=result.created, existing=result.existing)
        except Exception:
            log.exception("planning failed")
        await wait_or_stop(rt.clock, stop, rt.settings.plan_interval_seconds)


async def run_sweeper(rt: Runtime, stop: asyncio.Event) -> None:
    while not stop.is_set():
        try:
            await rt.sweeper.sweep_once()
        except Exception:
            log.exception("sweep failed")
        await wait_or_stop(rt.clock, stop, rt.settings.sweep_interval_seconds)


async def run_outbox(rt: Runtime, stop: asyncio.Event) -> None:
    """Publish what other processes (or a failed publish) left on the outbox."""
    while not stop.is_set():
        try:
            await rt.outbox.flush()
        except Exception:
            log.exception("outbox publish failed")
        await wait_or_stop(rt.clock, stop, rt.settings.outbox_interval_seconds)


async def run_event_fanout(rt: Runtime, stop: asyncio.Event) -> None:
    """Fan out accepted events a page at a time (tepat/services/events.py): straight on
    while there is work, else look again after the outbox interval (an event accepted
    by an API in another process is found by that poll)."""
    service = event_service(rt)
    while not stop.is_set():
        pages = 0
        try:
            pages = await service.fan_out_once()
        except Exception:
            log.exception("event fan-out failed")
        if not pages:
            await wait_or_stop(rt.clock, stop, rt.settings.outbox_interval_seconds)


async def run_webhook_emitter(rt: Runtime, stop: asyncio.Event) -> None:
    """Turn the status journal into webhook deliveries (tepat/services/webhooks.py):
    straight on while there is a backlog, else look again after the outbox interval."""
    from tepat.services.webhooks import WebhookEmitter

    emitter = WebhookEmitter(rt.store, rt.clock)
    while not stop.is_set():
        taken = 0
        try:
            taken = await emitter.emit_once()
        except Exception:
            log.exception("webhook emitter failed")
        if not taken:
            await wait_or_stop(rt.clock, stop, rt.settings.outbox_interval_seconds)
