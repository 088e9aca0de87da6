"""The PushProvider port: hand notifications to a push service, with typed outcomes.

A provider call never raises for a provider-side problem: it returns what
happened (docs/PRINCIPLES.md §1, principle 4), so callers only branch on types.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol


@dataclass(frozen=True, slots=True)
class PushRequest:
    message_id: str
    push_token: str
    title: str
    body: str
    data: Mapping[str, Any] = field(default_factory=dict)
    category: str | None = None
    ttl_seconds: int | None = None
    priority: str = "high"
    sound: str | None = "default"


@dataclass(frozen=True, slots=True)
class TicketOk:
    ticket_id: str


@dataclass(frozen=True, slots=True)
class TicketError:
    """The provider refused one notification of a request."""

    code: str  # Expo's details.error, e.g. DeviceNotRegistered
    message: str
    permanent: bool
    deactivate_device: bool = False
    retry_after: float | None = None


TicketOutcome = TicketOk | TicketError


@dataclass(frozen=True, slots=True)
class Tickets:
    """Per-notification outcomes, in request order."""

    outcomes: list[TicketOutcome]


@dataclass(frozen=True, slots=True)
class RetryLater:
    """The whole request failed in a way worth retrying (429, 5xx, network).

    ``maybe_sent`` says whether the provider may have acted on the request anyway:

    * ``False``, *not sent*: the request never reached the provider whole (no connection,
      pool timeout, an error while the body was still being written) or the provider
      refused it without acting (429, 408). Sending again cannot duplicate anything.
    * ``True``, *maybe sent*: the whole request went out and the answer was lost or was
      a server error (read timeout, connection dropped while waiting, 5xx, an unreadable
      200). The provider may have accepted some or all of it, so sending again may
      deliver a second copy; whether to do so is the category's ``maybe_sent`` policy
      (:class:`tepat.domain.categories.MaybeSentPolicy`).

    Only the send call gives the flag a meaning; reading receipts is idempotent.
    """

    reason: str
    retry_after: float | None = None
    maybe_sent: bool = False
    # The provider's rate limit refused it (429): the sender should slow down.
    throttled: bool = False


@dataclass(frozen=True, slots=True)
class Rejected:
    """The whole request failed for good (bad credentials, malformed request)."""

    reason: str


SendResult = Tickets | RetryLater | Rejected


@dataclass(frozen=True, slots=True)
class ReceiptOk:
    pass


@dataclass(frozen=True, slots=True)
class ReceiptError:
    code: str
    message: str
    deactivate_device: bool = False


Receipt = ReceiptOk | ReceiptError


@dataclass(frozen=True, slots=True)
class Receipts:
    """Receipts that are ready; ids with no receipt yet are absent."""

    by_ticket: dict[str, Receipt]


ReceiptResult = Receipts | RetryLater | Rejected


class PushProvider(Protocol):
    max_batch: int  # notifications per send call
    max_receipt_batch: int  # ticket ids per receipts call

    async def send(self, batch: Sequence[PushRequest]) -> SendResult: ...

    def set_rate_share(self, share: float) -> None:
        """This process's part (0 < share <= 1) of the provider's configured rate ceiling,
        when several consumer processes send for one project."""
        ...

    async def receipts(self, ticket_ids: Sequence[str]) -> ReceiptResult: ...

    async def close(self) -> None: ...
