"""The receipt poller: turn provider tickets into delivered / failed, and prune dead devices."""

from __future__ import annotations

from datetime import timedelta

import structlog

from tepat.clock import Clock
from tepat.domain.models import MessageStatus, Ticket
from tepat.ports.push import PushProvider, ReceiptError, ReceiptOk, Receipts
from tepat.ports.store import Store
from tepat.services.device_health import device_failed, device_succeeded

log = structlog.get_logger("tepat.receipts")

# Expo keeps receipts for about a day; after that an absent receipt will never come.
RECEIPT_RETENTION = timedelta(hours=24)


class ReceiptPoller:
    def __init__(
        self,
        store: Store,
        push: PushProvider,
        clock: Clock,
        delay: timedelta = timedelta(minutes=15),
        device_max_failures: int = 3,
    ) -> None:
        self._store = store
        self._push = push
        self._clock = clock
        self.delay = delay
        self._device_max_failures = device_max_failures

    async def poll_once(self) -> int:
        """Fetch receipts for tickets older than the delay; returns how many were recorded."""
        now = self._clock.now()
        tickets = await self._store.tickets_awaiting_receipt(
            sent_before=now - self.delay, limit=self._push.max_receipt_batch
        )
        if not tickets:
            return 0
        result = await self._push.receipts([t.ticket_id for t in tickets])
        if not isinstance(result, Receipts):
            log.warning("receipts unavailable", reason=result.reason)
            return 0
        recorded = 0
        for ticket in tickets:
            receipt = result.by_ticket.get(ticket.ticket_id)
            if receipt is None:
                if now - ticket.sent_at > RECEIPT_RETENTION:
                    await self._store.record_receipt(ticket.ticket_id, "expired", None, now)
                continue
            recorded += await self._apply(ticket, receipt)
        return recorded

    async def poll_all(self) -> int:
        """Poll until no ready receipts remain (one round of the poller loop)."""
        total = 0
        while (n := await self.poll_once()) > 0:
            total += n
        return total

    async def _apply(self, ticket: Ticket, receipt: ReceiptOk | ReceiptError) -> int:
        now = self._clock.now()
        if isinstance(receipt, ReceiptOk):
            if not await self._store.record_receipt(ticket.ticket_id, "ok", None, now):
                return 0
            await self._store.transition(
                ticket.message_id, MessageStatus.DELIVERED, now, expect=[MessageStatus.SENT]
            )
            await device_succeeded(self._store, ticket.push_token, self._device_max_failures)
            return 1
        if not await self._store.record_receipt(ticket.ticket_id, "error", receipt.code, now):
            return 0
        await device_failed(
            self._store,
            ticket.push_token,
            receipt.code,
            deactivate=receipt.deactivate_device,
            max_failures=self._device_max_failures,
            user_id=ticket.user_id,
            device_id=ticket.device_id,
        )
        # A message to several devices fails only when every one of its tickets failed.
        siblings = await self._store.tickets_for_message(ticket.message_id)
        if all(t.receipt_status == "error" for t in siblings):
            await self._store.transition(
                ticket.message_id,
                MessageStatus.FAILED,
                now,
                expect=[MessageStatus.SENT],
                reason=receipt.code,
                last_error=f"{receipt.code}: {receipt.message}",
            )
        return 1
