"""The PushProvider port: hand notifications to a push service, with typed outcomes (a
call never raises for a provider-side problem; a temporary failure is ``TryAgain``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from tepat.ports.try_again import TryAgain


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
    # Asked right before the request goes out, after every wait (a free connection, the
    # rate limiter, a Retry-After pause), as a channel's ``Outgoing.still_sendable``:
    # False once this process may no longer send it (its lease ran out meanwhile).
    still_sendable: Callable[[], bool] = lambda: True
    # A critical event's or a safety message: it may use the provider's critical reserve
    # (tepat.domain.queues.may_use_critical_reserve).
    critical: bool = False


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
    """Per-notification outcomes, in request order. A notification that failed for the
    moment beside others that were answered (a provider taking one notification per
    request: FCM, APNs) is its own ``TryAgain``, so that its flags (maybe sent, throttled,
    a 5xx) reach the recorder as a whole request's would."""

    outcomes: list[TicketOutcome | TryAgain]


@dataclass(frozen=True, slots=True)
class Rejected:
    """The whole request failed for good (bad credentials, malformed request)."""

    reason: str


SendResult = Tickets | TryAgain | Rejected


class GateClosed(Exception):
    """Raised by a provider instead of sending: the ``still_sendable`` of ``message_ids``
    said no. Nothing of the request went out; the caller sends the others again without
    them."""

    def __init__(self, message_ids: set[str]) -> None:
        super().__init__(f"{len(message_ids)} messages may no longer be sent")
        self.message_ids = message_ids


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


ReceiptResult = Receipts | TryAgain | Rejected


class PushProvider(Protocol):
    @property
    def max_batch(self) -> int:
        """Notifications per send call, now (a throttled provider may ask for fewer)."""

    @property
    def max_receipt_batch(self) -> int:
        """Ticket ids per receipts call; 0 for a provider whose answer at send time is
        final (FCM, APNs): its tickets are not kept for the receipt poller."""

    async def send(self, batch: Sequence[PushRequest]) -> SendResult: ...

    def set_rate_share(self, share: float) -> None:
        """This process's part (0 < share <= 1) of the provider's configured rate ceiling,
        when several consumer processes send for one project."""

    async def receipts(self, ticket_ids: Sequence[str]) -> ReceiptResult: ...

    async def close(self) -> None: ...
