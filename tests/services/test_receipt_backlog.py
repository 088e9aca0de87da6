"""Receipt polling reaches every ticket, whatever the backlog of receipts not ready yet."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from tepat.adapters.sqlite import SqliteStore
from tepat.clock import FakeClock
from tepat.domain.models import Device, Ticket, User
from tepat.ports.push import (
    PushRequest,
    ReceiptError,
    ReceiptResult,
    Receipts,
    SendResult,
    Tickets,
)
from tepat.services.sending.receipts import ReceiptPoller

START = datetime(2027, 3, 1, 9, 0, tzinfo=UTC)


class ReceiptsReadyFor:
    """A provider whose receipts are ready only for the tickets it names."""

    max_batch = 100
    max_receipt_batch = 1000

    def __init__(self, ready: dict[str, ReceiptError]) -> None:
        self.ready = ready
        self.asked: list[str] = []

    async def send(self, batch: Sequence[PushRequest]) -> SendResult:
        return Tickets([])

    async def receipts(self, ticket_ids: Sequence[str]) -> ReceiptResult:
        self.asked.extend(ticket_ids)
        return Receipts({t: self.ready[t] for t in ticket_ids if t in self.ready})

    async def close(self) -> None:
        pass

    def set_rate_share(self, share: float) -> None:
        pass


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(START)


@pytest.fixture
async def store(tmp_path: Path, clock: FakeClock) -> AsyncIterator[SqliteStore]:
    """A store with user ``u``."""
    store = SqliteStore(str(tmp_path / "t.db"), clock=clock)
    await store.open()
    try:
        await store.upsert_user(User("u", "UTC"))
        yield store
    finally:
        await store.close()


async def test_a_thousand_tickets_without_receipts_do_not_hide_a_newer_dead_token(
    store: SqliteStore, clock: FakeClock
) -> None:
    dead, _ = await store.register_device(Device("u", "old-phone", "ExponentPushToken[dead]"))
    # 1,500 tickets whose receipts Expo has not made ready yet, sent first...
    backlog = [
        Ticket(f"t{n:05d}", f"m{n}", "u", "other", "ExponentPushToken[x]", START)
        for n in range(1500)
    ]
    # ...then one to a phone that was uninstalled.
    newer = Ticket(
        "z-dead", "m-dead", "u", dead.device_id, dead.push_token, START + timedelta(minutes=1)
    )
    await store.add_tickets([*backlog, newer])
    provider = ReceiptsReadyFor(
        {"z-dead": ReceiptError("DeviceNotRegistered", "gone", deactivate_device=True)}
    )
    poller = ReceiptPoller(store, provider, clock, delay=timedelta(minutes=15))
    clock.advance(timedelta(minutes=20))

    assert await poller.poll_all() == 1
    assert "z-dead" in provider.asked
    (device,) = await store.list_devices("u")
    assert not device.active and device.deactivated_reason == "DeviceNotRegistered"
