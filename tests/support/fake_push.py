"""A PushProvider that records what it is asked to send; accepts all unless told to refuse."""

from __future__ import annotations

import itertools
from collections.abc import Sequence

from tepat.ports.push import (
    PushRequest,
    ReceiptResult,
    Receipts,
    SendResult,
    TicketError,
    TicketOk,
    TicketOutcome,
    Tickets,
)


class FakePush:
    max_batch = 100
    max_receipt_batch = 1000

    def __init__(self) -> None:
        self.batches: list[list[PushRequest]] = []
        self._ids = itertools.count(1)
        # Set to refuse every notification with this ticket error.
        self.refuse_with: TicketError | None = None

    @property
    def requests(self) -> list[PushRequest]:
        return [r for batch in self.batches for r in batch]

    async def send(self, batch: Sequence[PushRequest]) -> SendResult:
        self.batches.append(list(batch))
        return Tickets([self._outcome() for _ in batch])

    def _outcome(self) -> TicketOutcome:
        if self.refuse_with is not None:
            return self.refuse_with
        return TicketOk(f"ticket-{next(self._ids)}")

    async def receipts(self, ticket_ids: Sequence[str]) -> ReceiptResult:
        return Receipts({})

    def set_rate_share(self, share: float) -> None:
        pass

    async def close(self) -> None:
        pass
