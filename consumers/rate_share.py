"""Share the provider's rate ceiling among the live consumer processes, with no new parts.

Each consumer process beats in the store every couple of seconds and counts
the live members of its group (one group per Expo project: URL and
credential). It then takes ``ceiling / live`` as its own ceiling. A process
that dies stops beating and drops out within the TTL; one that joins is
counted at its first beat. So ``TEPAT_EXPO_RATE_LIMIT`` is the project's
limit, never divided by hand, and two processes together stay under it; the same
share applies to ``TEPAT_SMTP_RATE`` and ``TEPAT_TWILIO_RATE`` (the consumer
processes of one deployment send every channel).
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import socket
import uuid

import structlog

from tepat import metrics
from tepat.ports.repositories.presence import LIVE_TTL
from tepat.runtime import Runtime

log = structlog.get_logger("tepat.rate_share")

BEAT_SECONDS = 2.0


def rate_group(rt: Runtime) -> str:
    """One group per Expo project: the processes that share a rate limit."""
    token = rt.settings.expo_access_token
    secret = token.get_secret_value() if token else ""
    digest = hashlib.sha256(f"{rt.settings.expo_url}|{secret}".encode()).hexdigest()[:16]
    return f"expo-rate:{digest}"


async def run_rate_share(rt: Runtime, stop: asyncio.Event) -> None:
    group = rate_group(rt)
    member = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"  # this process
    live = 1

    async def beat() -> None:
        nonlocal live
        now_live = await rt.store.heartbeat(group, member, rt.clock.now(), LIVE_TTL)
        if now_live != live:
            log.info("consumers sharing the provider's rate", live=now_live)
        live = max(1, now_live)
        metrics.LIVE_CONSUMERS.set(live)
        # The same processes send every channel: push's, e-mail's and SMS's rates.
        rt.dispatcher.channels.set_rate_share(1.0 / live)

    try:
        # A failed beat keeps the last share: a store hiccup must not double anyone's
        # rate. During a store outage it is one warning line a beat, not a traceback.
        await rt.every(stop, BEAT_SECONDS, beat, log, "rate share heartbeat failed")
    finally:
        try:
            await rt.store.leave(group, member)
        except Exception:
            log.warning("could not leave the rate group; it expires by itself")
