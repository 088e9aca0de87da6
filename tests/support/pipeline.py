"""The whole delivery pipeline in one test: store, broker, consumer, receipt poller, Expo sandbox.

The sandbox is a real HTTP server (in a thread); the store is SQLite on disk;
the broker is whatever the caller passes (the embedded one by default). Time is
a FakeClock shared by Tepat and the sandbox.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, time
from pathlib import Path
from typing import Any

from consumers.worker import run_consumer
from scheduler.jobs import run_outbox
from tepat.clock import FakeClock
from tepat.config import Settings
from tepat.domain.models import Device, Message, MessageStatus, Reminder, User
from tepat.ports.broker import Broker
from tepat.ports.push import PushProvider
from tepat.runtime import Runtime, open_runtime
from tepat.sandbox.expo import ExpoSandbox
from tepat.sandbox.server import running_sandbox


@dataclass
class Pipeline:
    rt: Runtime
    sandbox: ExpoSandbox
    clock: FakeClock
    consumers: list[tuple[asyncio.Task[None], asyncio.Event]] = field(default_factory=list)
    loops: list[tuple[asyncio.Task[None], asyncio.Event]] = field(default_factory=list)

    def start_outbox(self) -> None:
        """The outbox publisher loop, as the scheduler process runs it (on the fake clock)."""
        stop = asyncio.Event()
        self.loops.append((asyncio.create_task(run_outbox(self.rt, stop)), stop))

    async def stop_loops(self) -> None:
        for _task, stop in self.loops:
            stop.set()
        await asyncio.gather(*(t for t, _ in self.loops), return_exceptions=True)
        self.loops.clear()

    def start_consumer(self) -> tuple[asyncio.Task[None], asyncio.Event]:
        stop = asyncio.Event()
        task = asyncio.create_task(run_consumer(self.rt, stop))
        self.consumers.append((task, stop))
        return task, stop

    async def stop_consumers(self) -> None:
        for _task, stop in self.consumers:
            stop.set()
        await asyncio.gather(*(t for t, _ in self.consumers), return_exceptions=True)
        self.consumers.clear()

    async def add_user(
        self,
        user_id: str,
        timezone: str = "Europe/London",
        token: str | None = None,
        reminders: list[tuple[str, str, time]] | None = None,
        kind: str = "expo",
        **user_fields: Any,
    ) -> tuple[User, Device]:
        """A user with one device and reminders given as (reminder_id, category, local time)."""
        now = self.clock.now()
        user, _ = await self.rt.store.upsert_user(
            User(user_id, timezone, created_at=now, updated_at=now, **user_fields)
        )
        device, _ = await self.rt.store.register_device(
            Device(
                user_id,
                f"{user_id}-phone",
                token or f"ExponentPushToken[{user_id}]",
                created_at=now,
                updated_at=now,
                kind=kind,
            )
        )
        for reminder_id, category, at in reminders or []:
            await self.rt.store.upsert_reminder(
                Reminder(
                    user_id,
                    reminder_id,
                    category,
                    at,
                    title=f"{category} time",
                    body=f"{reminder_id} for {user_id}",
                    created_at=now,
                    updated_at=now,
                )
            )
        return user, device

    def received_for(self, token: str) -> list[dict[str, Any]]:
        return [r for r in self.sandbox.received() if r["to"] == token]

    async def messages(self, user_id: str) -> list[Message]:
        from tepat.ports.repositories.messages import MessageQuery

        page = await self.rt.store.list_messages(MessageQuery(user_id, limit=500))
        return page.items

    async def sent_with_tickets(self, message_id: str) -> bool:
        """Sent and its tickets stored: the receipt poller can see it.

        The dispatcher records ``sent`` first and stores the tickets after it (a
        failure there costs receipts, never a second send), so a test that polls
        receipts must wait for both, not for ``sent`` alone.
        """
        m = await self.rt.store.get_message(message_id)
        if m is None or m.status is not MessageStatus.SENT:
            return False
        return bool(await self.rt.store.tickets_for_message(message_id))

    async def status_of(self, message_id: str) -> MessageStatus | None:
        m = await self.rt.store.get_message(message_id)
        return m.status if m else None


@asynccontextmanager
async def pipeline(
    tmp_path: Path,
    *,
    start: datetime = datetime(2027, 3, 1, 6, 0, tzinfo=UTC),
    broker: Broker | None = None,
    sandbox: ExpoSandbox | None = None,
    consumer: bool = True,
    clock: FakeClock | None = None,
    push_providers: Mapping[str, PushProvider] | None = None,
    **settings: Any,
) -> AsyncIterator[Pipeline]:
    """``clock``: the one ``broker`` runs on, if it has one (else a new clock at ``start``).
    ``push_providers``: by device kind, instead of those the settings build."""
    clock = clock or FakeClock(start)
    sandbox = sandbox or ExpoSandbox(clock=clock, receipt_delay_seconds=60)
    sandbox.clock = clock
    with running_sandbox(sandbox) as served:
        config = Settings(
            **{
                "database_url": f"sqlite:///{tmp_path}/tepat.db",
                "broker_url": "embedded://",
                "expo_url": served.base_url,
                "receipt_delay_seconds": 900,
                **settings,
            }
        )
        providers = dict(push_providers or {})
        expo = providers.pop("expo", None)
        async with open_runtime(
            config, clock=clock, broker=broker, push=expo, push_providers=providers
        ) as rt:
            p = Pipeline(rt, sandbox, clock)
            p.start_outbox()
            if consumer:
                p.start_consumer()
            try:
                yield p
            finally:
                await p.stop_consumers()
                await p.stop_loops()
