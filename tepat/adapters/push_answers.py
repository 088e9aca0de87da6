"""A batch's answer from the answers of its notifications, for the push providers that
take one notification per request (FCM, APNs, Web Push).

The port answers a batch either per notification (``Tickets``) or as a whole
(``TryAgain`` / ``Rejected``): when no notification got a ticket or a refusal of its own,
the batch's answer is the whole one (the merged ``TryAgain``, or ``Rejected``);
otherwise a notification that failed for the moment keeps its own ``TryAgain`` beside
the others' tickets, and one refused for good is a permanent ``TicketError``.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Sequence

from tepat.ports.push import (
    GateClosed,
    PushRequest,
    ReceiptResult,
    Receipts,
    Rejected,
    SendResult,
    TicketError,
    TicketOutcome,
    Tickets,
)
from tepat.ports.try_again import TryAgain

Answer = TicketOutcome | TryAgain | Rejected

#: JSON as the providers take it: no spaces, UTF-8 left as it is.
compact_json = json.JSONEncoder(
    separators=(",", ":"), ensure_ascii=False, check_circular=False
).encode


class AnsweredAtSend:
    """Base of a provider whose answer at send time is final: no receipts to poll, and
    (unless it says otherwise) no published rate ceiling to share."""

    max_receipt_batch: int = 0

    def set_rate_share(self, share: float) -> None:
        pass

    async def receipts(self, ticket_ids: Sequence[str]) -> ReceiptResult:
        return Receipts({})


async def send_each(
    batch: Sequence[PushRequest],
    max_batch: int,
    refused_before_sending: Callable[[PushRequest], TicketError | None],
    send_one: Callable[[PushRequest], Awaitable[Answer]],
) -> SendResult:
    """Send each notification of ``batch`` that ``refused_before_sending`` lets through
    (a malformed token, a payload too large) as its own concurrent request; GateClosed
    before any goes out when one may no longer be sent."""

    async def send_all(requests: list[PushRequest]) -> list[Answer]:
        return list(await asyncio.gather(*(send_one(r) for r in requests)))

    return await send_together(batch, max_batch, refused_before_sending, send_all)


async def send_together(
    batch: Sequence[PushRequest],
    max_batch: int,
    refused_before_sending: Callable[[PushRequest], TicketError | None],
    send_all: Callable[[list[PushRequest]], Awaitable[list[Answer]]],
) -> SendResult:
    """As :func:`send_each`, ``send_all`` sending the notifications let through at once
    and answering each, in order."""
    if len(batch) > max_batch:
        raise ValueError(f"at most {max_batch} notifications per send, got {len(batch)}")
    answers: list[Answer | None] = [refused_before_sending(r) for r in batch]
    to_send = [i for i, a in enumerate(answers) if a is None]
    closed = {batch[i].message_id for i in to_send if not batch[i].still_sendable()}
    if closed:
        raise GateClosed(closed)
    sent = await send_all([batch[i] for i in to_send])
    for i, answer in zip(to_send, sent, strict=True):
        answers[i] = answer
    return batch_result([a for a in answers if a is not None])


def batch_result(answers: list[Answer]) -> SendResult:
    if answers and all(isinstance(a, TryAgain | Rejected) for a in answers):
        rejected = [a for a in answers if isinstance(a, Rejected)]
        if rejected:
            return rejected[0]
        again = [a for a in answers if isinstance(a, TryAgain)]
        return TryAgain(
            again[0].reason,
            retry_after=max((a.retry_after or 0.0 for a in again), default=None) or None,
            maybe_sent=any(a.maybe_sent for a in again),
            throttled=any(a.throttled for a in again),
            server_error=any(a.server_error for a in again),
            terms=next((a.terms for a in again if a.terms), None),
        )
    return Tickets([_per_notification(a) for a in answers])


def _per_notification(answer: Answer) -> TicketOutcome | TryAgain:
    if isinstance(answer, Rejected):
        return TicketError("Rejected", answer.reason, permanent=True)
    return answer
