"""A receipt's dead token that was only a device's fallback: the fallback is dropped, the
device kept, and the log says so (not "device deactivated")."""

from __future__ import annotations

from datetime import timedelta

import pytest
from structlog.testing import capture_logs

from tepat.adapters.sqlite import SqliteStore
from tepat.clock import FakeClock
from tepat.domain.models import Device, Ticket
from tepat.ports.push import ReceiptError
from tepat.services.sending.receipts import ReceiptPoller
from tests.services import test_receipt_backlog
from tests.services.test_receipt_backlog import START, ReceiptsReadyFor

clock, store = test_receipt_backlog.clock, test_receipt_backlog.store

EXPO_TOKEN = "ExponentPushToken[expo-side]"
DEAD = ReceiptError("DeviceNotRegistered", "gone", deactivate_device=True)
DROPPED = ("fallback token dropped", "device deactivated")


@pytest.mark.parametrize(
    ("phone", "event", "kept"),
    [
        pytest.param(
            # an FCM phone whose Expo token took a failed-over send
            Device(
                "u",
                "phone",
                "fcm-token",
                kind="fcm",
                fallback_kind="expo",
                fallback_token=EXPO_TOKEN,
            ),
            "fallback token dropped",
            True,
            id="the_fallback_token",
        ),
        pytest.param(
            Device("u", "phone", EXPO_TOKEN), "device deactivated", False, id="its_own_token"
        ),
    ],
)
async def test_a_dead_token_in_a_receipt_says_what_it_ended(
    store: SqliteStore, clock: FakeClock, phone: Device, event: str, kept: bool
) -> None:
    await store.register_device(phone)
    await store.add_tickets([Ticket("t1", "m1", "u", "phone", EXPO_TOKEN, START)])
    poller = ReceiptPoller(store, ReceiptsReadyFor({"t1": DEAD}), clock)
    clock.advance(timedelta(minutes=20))
    with capture_logs() as logs:
        assert await poller.poll_all() == 1
    assert [e for e in logs if e["event"] in DROPPED] == [
        {
            "event": event,
            "user_id": "u",
            "device_id": "phone",
            "reason": "DeviceNotRegistered",
            "log_level": "info",
        }
    ]
    [device] = await store.list_devices("u")
    assert (device.active, device.fallback_token) == (kept, None)
