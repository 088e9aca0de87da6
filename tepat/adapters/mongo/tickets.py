"""Push tickets and their receipts."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from tepat.adapters.mongo.base import MongoBase, keyset_after
from tepat.adapters.mongo.codecs import bson_dt, ticket_doc, ticket_from_doc
from tepat.domain.models import Ticket


class TicketsMixin(MongoBase):
    async def add_tickets(self, tickets: Sequence[Ticket]) -> None:
        # A replayed batch (consumer retried after a crash) must not fail the tickets
        # that are new, nor overwrite receipts of those already stored.
        await self._insert_new("tickets", [ticket_doc(t) for t in tickets])

    async def tickets_awaiting_receipt(
        self, sent_before: datetime, limit: int, after: tuple[datetime, str] | None = None
    ) -> list[Ticket]:
        flt: dict[str, Any] = {
            "receipt_status": None,
            "sent_at": {"$lt": bson_dt(sent_before)},
        }
        order = ["sent_at", "_id"]
        if after is not None:
            # A page of tickets whose receipts are not ready yet never hides those behind.
            flt.update(keyset_after(order, (bson_dt(after[0]), after[1])))
        return await self._fetch(ticket_from_doc, "tickets", flt, sort=order, limit=limit)

    async def record_receipt(
        self, ticket_id: str, status: str, error: str | None, now: datetime
    ) -> bool:
        receipt = {"receipt_status": status, "receipt_error": error, "checked_at": bson_dt(now)}
        awaited = {"_id": ticket_id, "receipt_status": None}
        return bool(await self._update("tickets", awaited, {"$set": receipt}))

    async def tickets_for_message(self, message_id: str) -> list[Ticket]:
        query = {"message_id": message_id}
        return await self._fetch(ticket_from_doc, "tickets", query, sort=["sent_at", "_id"])
