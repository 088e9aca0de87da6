"""The scheduler process: run the creator job and the sweeper on their intervals."""

from __future__ import annotations

import asyncio

import structlog

from tepat.domain.zones import TZDATA_RELEASE
from tepat.runtime import Runtime, event_service
from tepat.tracing import span

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

    async def plan() -> None:
        with span("plan run"):  # the trace of every message it makes
            result = await rt.creator.plan_ahead()
        log.info("planned", created=result.created, existing=result.existing)

    await rt.every(stop, rt.settings.plan_interval_seconds, plan, log, "planning failed")


async def run_sweeper(rt: Runtime, stop: asyncio.Event) -> None:
    seconds = rt.settings.sweep_interval_seconds
    await rt.every(stop, seconds, rt.sweeper.sweep_once, log, "sweep failed")


async def run_outbox(rt: Runtime, stop: asyncio.Event) -> None:
    """Publish what other processes (or a failed publish) left on the outbox."""
    seconds = rt.settings.outbox_interval_seconds
    await rt.every(stop, seconds, rt.outbox.flush, log, "outbox publish failed")


async def run_event_fanout(rt: Runtime, stop: asyncio.Event) -> None:
    """Fan out accepted events a page at a time (tepat/services/events.py): straight on
    while there is work, else look again after the outbox interval (an event accepted
    by an API in another process is found by that poll)."""
    fan_out = event_service(rt).fan_out_once
    seconds = rt.settings.outbox_interval_seconds
    await rt.every(stop, seconds, fan_out, log, "event fan-out failed", while_busy=True)


async def run_webhook_emitter(rt: Runtime, stop: asyncio.Event) -> None:
    """Turn the status journal into webhook deliveries (tepat/services/webhooks.py):
    straight on while there is a backlog, else look again after the outbox interval."""
    from tepat.services.webhooks import WebhookEmitter

    emit = WebhookEmitter(rt.store, rt.clock).emit_once
    seconds = rt.settings.outbox_interval_seconds
    await rt.every(stop, seconds, emit, log, "webhook emitter failed", while_busy=True)
