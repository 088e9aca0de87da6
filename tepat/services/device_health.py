"""What a provider's verdict on one device does to it (shared by the sender and the receipt poller).

- ``DeviceNotRegistered`` (in a ticket or a receipt): deactivate at once; a dead
  fallback token (a failed-over send's) is dropped as the device's fallback instead,
  its own binding kept (one store call decides both: ``deactivate_token``).
- Any other failure the device can be blamed for: one more consecutive failure;
  ``max_failures`` in a row deactivate it. A success resets the count.
- Configuration or rate problems (bad credentials, sender mismatch, too many
  messages to one device) say nothing about the device and count for nothing.
"""

from __future__ import annotations

import structlog

from tepat.domain.models import Device, Ticket
from tepat.ports.push import ReceiptError, TicketError
from tepat.ports.repositories.devices import DeviceRepository

log = structlog.get_logger("tepat.devices")

NOT_THE_DEVICES_FAULT = frozenset({"InvalidCredentials", "MismatchSenderId", "MessageRateExceeded"})


async def device_failed(
    store: DeviceRepository,
    device: Device | Ticket,
    error: TicketError | ReceiptError,
    max_failures: int,
) -> None:
    code = reason = error.code
    event = "device deactivated"
    if error.deactivate_device:
        if await _only_a_fallback(store, device):
            event = "fallback token dropped"
        await store.deactivate_token(device.push_token, code)
    elif code in NOT_THE_DEVICES_FAULT:
        return
    else:
        outcome = await store.record_device_outcome(
            device.push_token, ok=False, max_failures=max_failures, reason=code
        )
        if not outcome.deactivated:
            return
        reason = f"{outcome.consecutive_failures} consecutive failures: {code}"
    log.info(event, user_id=device.user_id, device_id=device.device_id, reason=reason)


async def _only_a_fallback(store: DeviceRepository, sent_to: Device | Ticket) -> bool:
    """Whether the dead token is the device's fallback, not its own: a failed-over send's,
    answered at once (the sender's copy of the device) or in a receipt (a ticket, which
    names only the token). Read from the stored device before the token is dropped."""
    token = sent_to.push_token
    return any(
        d.device_id == sent_to.device_id and d.fallback_token == token != d.push_token
        for d in await store.list_devices(sent_to.user_id)
    )


async def device_succeeded(store: DeviceRepository, push_token: str, max_failures: int) -> None:
    await store.record_device_outcome(push_token, ok=True, max_failures=max_failures, reason="")
