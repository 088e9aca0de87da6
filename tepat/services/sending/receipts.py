"""The receipt poller: turn provider tickets into delivered / failed, and prune dead devices.

Each receipt recorded gets one INFO line, ``receipt recorded``: with the send's line
(``send recorded``, :mod:`tepat.services.sending.recording`) it closes a push's trail.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Protocol

import structlog

from tepat import tracing
from tepat.clock import Clock
from tepat.domain.models import MessageStatus, Ticket
from tepat.domain.queues import PUSH
from tepat.ports.push import PushProvider, ReceiptError, ReceiptOk, Receipts
from tepat.ports.repositories.devices import DeviceRepository
from tepat.ports.repositories.messages import MessageRepository
from tepat.ports.repositories.tickets import TicketRepository
from tepat.services.device_health import device_failed, device_succeeded
from tepat.services.sending.message_log import message_line

log = structlog.get_logger("tepat.receipts")

# Expo keeps receipts for about a day; after that an absent receipt will never come.
RECEIPT_RETENTION = timedelta(hours=24)


class ReceiptRecords(TicketRepository, MessageRepository, DeviceRepository, Protocol): ...


@dataclass(eq=False)
class ReceiptPoller:
    store: ReceiptRecords
    push: PushProvider
    clock: Clock
    delay: timedelta = timedelta(minutes=15)
    device_max_failures: int = 3

    async def poll_all(self) -> int:
        """One round of the poller loop: every ticket awaiting a receipt, page by page.

        Pages follow the (sent_at, ticket id) key, not "the oldest without a
        receipt": when a thousand tickets have no receipt yet, newer ones are still
        polled within Expo's retention, so a dead token is seen in time.
        """
        total = 0
        after: tuple[datetime, str] | None = None
        while True:
            now = self.clock.now()
            tickets = await self.store.tickets_awaiting_receipt(
                sent_before=now - self.delay, limit=self.push.max_receipt_batch, after=after
            )
            if not tickets:
                return total
            # A span only for a page of tickets: an idle poll is no trace.
            with tracing.span("receipt poll", tickets=len(tickets)):
                result = await self.push.receipts([t.ticket_id for t in tickets])
                if not isinstance(result, Receipts):
                    log.warning("receipts unavailable", reason=result.reason)
                    return total
                traces = await self._traces(tickets)
                for ticket in tickets:
                    receipt = result.by_ticket.get(ticket.ticket_id)
                    if receipt is not None:
                        total += await self._apply(ticket, receipt, traces.get(ticket.message_id))
                    elif now - ticket.sent_at > RECEIPT_RETENTION:
                        await self.store.record_receipt(ticket.ticket_id, "expired", None, now)
            after = (tickets[-1].sent_at, tickets[-1].ticket_id)

    async def _traces(self, tickets: list[Ticket]) -> dict[str, str | None]:
        """The trace of each ticket's message, read only when tracing is on."""
        if not tracing.enabled():
            return {}
        messages = await self.store.get_messages(sorted({t.message_id for t in tickets}))
        return {m.id: m.trace_parent for m in messages}

    async def _apply(
        self, ticket: Ticket, receipt: ReceiptOk | ReceiptError, trace_parent: str | None
    ) -> int:
        now = self.clock.now()
        if isinstance(receipt, ReceiptOk):
            if not await self.store.record_receipt(ticket.ticket_id, "ok", None, now):
                return 0
            moved = await self.store.transition(
                ticket.message_id, MessageStatus.DELIVERED, now, expect=[MessageStatus.SENT]
            )
            _log_receipt(ticket, trace_parent, "ok", MessageStatus.DELIVERED if moved else None)
            await device_succeeded(self.store, ticket.push_token, self.device_max_failures)
            return 1
        if not await self.store.record_receipt(ticket.ticket_id, "error", receipt.code, now):
            return 0
        await device_failed(self.store, ticket, receipt, self.device_max_failures)
        # A message to several devices fails only when every one of its tickets failed.
        siblings = await self.store.tickets_for_message(ticket.message_id)
        moved = all(t.receipt_status == "error" for t in siblings) and (
            await self.store.transition(
                ticket.message_id,
                MessageStatus.FAILED,
                now,
                expect=[MessageStatus.SENT],
                reason=receipt.code,
                last_error=f"{receipt.code}: {receipt.message}",
            )
        )
        _log_receipt(ticket, trace_parent, receipt.code, MessageStatus.FAILED if moved else None)
        return 1


def _log_receipt(
    ticket: Ticket, trace_parent: str | None, receipt: str, outcome: MessageStatus | None
) -> None:
    """``receipt`` is ``ok`` or the provider's error code; ``outcome`` the status it moved
    the message to, absent when it moved none (another device's ticket still counts, or
    the message had already moved on)."""
    fields = {"device_id": ticket.device_id, "ticket_id": ticket.ticket_id, "receipt": receipt}
    if outcome is not None:
        fields["outcome"] = outcome.value
    event = "receipt recorded"
    log.info(
        event,
        **message_line(event, ticket.message_id, ticket.user_id, PUSH, trace_parent, **fields),
    )
