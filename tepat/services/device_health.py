"""What a provider's verdict on one device does to it (shared by the sender and the receipt poller).

- ``DeviceNotRegistered`` (in a ticket or a receipt): deactivate at once.
- Any other failure the device can be blamed for: one more consecutive failure;
  ``max_failures`` in a row deactivate it. A success resets the count.
- Configuration or rate problems (bad credentials, sender mismatch, too many
  messages to one device) say nothing about the device and count for nothing.
"""

from __future__ import annotations

import structlog

from tepat.ports.repositories.devices import DeviceRepository

log = structlog.get_logger("tepat.devices")

NOT_THE_DEVICES_FAULT = frozenset({"InvalidCredentials", "MismatchSenderId", "MessageRateExceeded"})


async def device_failed(
    store: DeviceRepository,
    push_token: str,
    code: str,
    *,
    deactivate: bool,
    max_failures: int,
    user_id: str,
    device_id: str,
) -> None:
    if deactivate:
        await store.deactivate_token(push_token, code)
        log.info("device deactivated", user_id=user_id, device_id=device_id, reason=code)
    elif code not in NOT_THE_DEVICES_FAULT:
        outcome = await store.record_device_outcome(
            push_token, ok=False, max_failures=max_failures, reason=code
        )
        if outcome.deactivated:
            log.info(
                "device deactivated",
                user_id=user_id,
                device_id=device_id,
                reason=f"{outcome.consecutive_failures} consecutive failures: {code}",
            )


async def device_succeeded(store: DeviceRepository, push_token: str, max_failures: int) -> None:
    await store.record_device_outcome(push_token, ok=True, max_failures=max_failures, reason="")
