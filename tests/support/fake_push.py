"""A PushProvider that records what it was asked to send and accepts everything."""

from __future__ import annotations

import itertools
from collections.abc import Sequence

from tepat.ports.push import PushRequest, ReceiptResult, Receipts, SendResult, TicketOk, Tickets


class FakePush:
    max_batch = 100
    max_receipt_batch = 1000

    def __init__(self) -> None:
        self.batches: list[list[PushRequest]] = []
        self._ids = itertools.count(1)

    @property
    def requests(self) -> list[PushRequest]:
        return [r for batch in self.batches for r in batch]

    async def send(self, batch: Sequence[PushRequest]) -> SendResult:
        self.batches.append(list(batch))
        return Tickets([TicketOk(f"ticket-{next(self._ids)}") for _ in batch])

    async def receipts(self, ticket_ids: Sequence[str]) -> ReceiptResult:
        return Receipts({})

    async def close(self) -> None:
        pass
