"""Issue 5's acceptance on a real ActiveMQ: real time, real processes, the Expo sandbox over HTTP.

Skipped unless ``TEPAT_TEST_STOMP_URL`` names a broker (``scripts/test.sh`` starts one);
the restart test also needs ``TEPAT_TEST_ACTIVEMQ_BASE`` (the broker's base directory).
Every test uses its own queue names, so runs on a shared broker never meet.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from consumers.worker import run_consumer
from tepat.clock import SystemClock
from tepat.config import Settings
from tepat.domain.categories import DEFAULT_CATEGORIES
from tepat.domain.models import Device, MessageStatus, User
from tepat.domain.planning import plan_oneoff, request_fingerprint
from tepat.ports.broker import Delivery
from tepat.ports.repositories.messages import MessageQuery
from tepat.runtime import Runtime, open_runtime
from tepat.sandbox.expo import ExpoSandbox
from tepat.sandbox.server import RunningSandbox, running_sandbox
from tests.support.waiting import eventually

pytestmark = pytest.mark.activemq
ROOT = Path(__file__).resolve().parents[2]


def _stomp_url() -> str:
    url = os.environ.get("TEPAT_TEST_STOMP_URL", "")
    if not url:
        pytest.skip("TEPAT_TEST_STOMP_URL is not set (scripts/test.sh starts ActiveMQ)")
    return url


@pytest.fixture
def served() -> Iterator[RunningSandbox]:
    with running_sandbox(ExpoSandbox()) as s:
        yield s


def _env(tmp_path: Path, served: RunningSandbox, prefix: str) -> dict[str, str]:
    categories = {
        p.name: {
            "quiet_hours": p.quiet_hours.value,
            "queue": f"{prefix}.{p.name}",
            "priority": p.priority,
        }
        for p in DEFAULT_CATEGORIES
    }
    return {
        "TEPAT_DATABASE_URL": f"sqlite:///{tmp_path}/tepat.db",
        "TEPAT_BROKER_URL": _stomp_url(),
        "TEPAT_EXPO_URL": served.base_url,
        "TEPAT_CATEGORIES": json.dumps(categories),
        "TEPAT_RECEIPT_DELAY_SECONDS": "3600",
        "TEPAT_LOG_LEVEL": "WARNING",
        # Several consumer processes on one host: no metrics port each.
        "TEPAT_METRICS_PORT": "0",
    }


@asynccontextmanager
async def _runtime(env: dict[str, str]) -> AsyncIterator[Runtime]:
    settings = Settings.model_validate(
        {k.removeprefix("TEPAT_").lower(): v for k, v in env.items()}
    )
    async with open_runtime(settings, clock=SystemClock()) as rt:
        yield rt


async def _seed_oneoffs(rt: Runtime, count: int, due_in: float) -> tuple[list[str], datetime]:
    """``count`` users with a device and a one-off each, across all categories.

    Returns their tokens and the instant the one-offs are due.
    """
    now = rt.clock.now()
    send_at = now + timedelta(seconds=due_in)
    categories = rt.categories.names
    tokens, messages = [], []
    for i in range(count):
        user, _ = await rt.store.upsert_user(
            User(f"u{i:04d}", "UTC", created_at=now, updated_at=now)
        )
        token = f"ExponentPushToken[amq-{i:04d}]"
        await rt.store.register_device(
            Device(user.user_id, f"{user.user_id}-phone", token, created_at=now, updated_at=now)
        )
        policy = rt.categories.get(categories[i % len(categories)])
        messages.append(
            plan_oneoff(
                user, policy, "k", "Hello", f"n{i}", {}, send_at, now, request_fingerprint({"i": i})
            )
        )
        tokens.append(token)
    created = (await rt.store.insert_messages(messages)).created
    assert len(created) == count
    await rt.enqueuer.enqueue(created)
    return tokens, send_at


def _ok_counts(served: RunningSandbox) -> Counter[str]:
    return Counter(r["to"] for r in served.sandbox.received() if r["status"] == "ok")


def _restart_broker() -> None:
    base = os.environ.get("TEPAT_TEST_ACTIVEMQ_BASE")
    if not base:
        pytest.skip("TEPAT_TEST_ACTIVEMQ_BASE is not set: cannot restart the broker")
    subprocess.run(
        [str(ROOT / "scripts/activemq.sh"), "restart", base], check=True, capture_output=True
    )


@pytest.mark.serial  # restarts the broker every other ActiveMQ test shares
async def test_1000_messages_5s_ahead_survive_a_broker_restart(
    tmp_path: Path, served: RunningSandbox
) -> None:
    env = _env(tmp_path, served, f"t{uuid.uuid4().hex[:8]}")
    async with _runtime(env) as rt:
        tokens, send_at = await _seed_oneoffs(rt, 1000, due_in=5.0)
        await asyncio.to_thread(_restart_broker)  # stop/start while every batch still waits
        stop = asyncio.Event()
        consumer = asyncio.create_task(run_consumer(rt, stop))
        try:
            await eventually(
                lambda: len(_ok_counts(served)) == 1000, timeout=120, what="1000 arrivals"
            )
        finally:
            stop.set()
            await consumer
        counts = _ok_counts(served)
        assert set(counts) == set(tokens)
        assert max(counts.values()) == 1, "a message was sent twice"
        # The consumer holds an early batch until each message's own instant.
        arrivals = [datetime.fromisoformat(r["received_at"]) for r in served.sandbox.received()]
        assert min(arrivals) >= send_at
        for i in range(0, 1000, 97):
            page = await rt.store.list_messages(MessageQuery(f"u{i:04d}"))
            assert [m.status for m in page.items] == [MessageStatus.SENT]


def _consumer_process(env: dict[str, str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "tepat.cli", "consumers"],
        env={**os.environ, **env},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


async def test_two_consumer_processes_never_send_twice(
    tmp_path: Path, served: RunningSandbox
) -> None:
    env = _env(tmp_path, served, f"t{uuid.uuid4().hex[:8]}")
    async with _runtime(env) as rt:
        procs = [_consumer_process(env), _consumer_process(env)]
        try:
            tokens, _ = await _seed_oneoffs(rt, 600, due_in=3.0)
            # Repeat every batch: at-least-once delivery must still send once.
            await rt.enqueuer.enqueue(
                await rt.store.due_pending(rt.clock.now() + timedelta(hours=1), 1000)
            )
            await eventually(
                lambda: len(_ok_counts(served)) == 600, timeout=120, what="600 arrivals"
            )
        finally:
            for p in procs:
                p.terminate()
            for p in procs:
                _, err = p.communicate(timeout=60)
                assert p.returncode == 0, err.decode()[-2000:]
        counts = _ok_counts(served)
        assert set(counts) == set(tokens) and max(counts.values()) == 1


async def _redelivered_or_dead(
    rt: Runtime, queue: str, deliveries: AsyncIterator[Delivery]
) -> Delivery | None:
    """The nacked batch coming back, or None once it shows up in the DLQ instead."""
    coming = asyncio.ensure_future(deliveries.__anext__())
    try:
        async with asyncio.timeout(30):
            while not coming.done():
                if await rt.broker.dead_letters([queue]):
                    return None
                await asyncio.wait({coming}, timeout=0.2)
        return coming.result()
    finally:
        coming.cancel()


def _tepat(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tepat.cli", *args],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


async def test_dlq_list_shows_reason_and_replay_sends_once(
    tmp_path: Path, served: RunningSandbox
) -> None:
    prefix = f"t{uuid.uuid4().hex[:8]}"
    # nacks come back after about 1 s, then 2 s: the third nack is past this age
    env = {**_env(tmp_path, served, prefix), "TEPAT_BROKER_RETRY_AGE_SECONDS": "2.5"}
    async with _runtime(env) as rt:
        [token], _ = await _seed_oneoffs(rt, 1, due_in=0.0)
        queue = rt.categories.get(rt.categories.names[0]).queue_name
        # A consumer that keeps failing on the batch: nacked until past the retry age.
        nacks = 0
        async with rt.broker.consume([queue], prefetch=1) as deliveries:
            iterator = deliveries.__aiter__()
            delivery: Delivery | None = await asyncio.wait_for(iterator.__anext__(), timeout=30)
            while delivery is not None:
                await rt.broker.nack(delivery, "store unreachable (simulated)")
                nacks += 1
                delivery = await _redelivered_or_dead(rt, queue, iterator)
    assert nacks >= 2
    listed = _tepat(env, "dlq", "list")
    assert listed.returncode == 0, listed.stderr
    line = next(ln for ln in listed.stdout.splitlines() if queue in ln)
    assert "store unreachable (simulated)" in line and f"attempts={nacks}" in line
    dead_id = line.split()[0]
    replay = _tepat(env, "dlq", "replay", dead_id)
    assert replay.returncode == 0, replay.stderr
    again = _tepat(env, "dlq", "replay", dead_id)
    assert again.returncode == 1  # gone from the DLQ: a second replay finds nothing
    async with _runtime(env) as rt:
        stop = asyncio.Event()
        consumer = asyncio.create_task(run_consumer(rt, stop))
        try:
            await eventually(lambda: _ok_counts(served)[token] == 1, timeout=60, what="sent")
        finally:
            stop.set()
            await consumer
    assert _ok_counts(served)[token] == 1
