"""The Channel port: hand rendered messages to one channel (push, inbox, e-mail, SMS,
webhooks), with typed outcomes, through the one send path
(``tepat/services/sending/channel_sender.py``). An adapter never raises for a
provider-side problem: it returns one outcome per item, in order.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from tepat.domain.models import Device, Message, Ticket
from tepat.ports.try_again import TryAgain


@dataclass(frozen=True, slots=True)
class Outgoing:
    """One message to one target, with everything the adapter needs to send it.

    ``message`` carries the rendered parts pinned at creation (``title``, ``body``,
    ``content``: ``html``, ``link``). ``target`` is what the channel addresses: a user id
    (inbox, push), an e-mail address, an E.164 number; ``devices``, push's: the user's
    active devices. ``unsubscribe_url``: for bulk categories on channels that offer
    one-click unsubscribe (RFC 8058).
    """

    message: Message
    target: str
    unsubscribe_url: str | None = None
    devices: tuple[Device, ...] = ()
    # Asked by an adapter that waits before its request (its rate limiter, a Retry-After
    # pause), right before it: False once this process may no longer send the message
    # (its lease ran out meanwhile: tepat/services/sending/lease.py). It then answers
    # Withheld and sends nothing.
    still_sendable: Callable[[], bool] = lambda: True


@dataclass(frozen=True, slots=True)
class Delivered:
    """Final at once: stored in the user's inbox."""


@dataclass(frozen=True, slots=True)
class Accepted:
    """The provider took it (SMTP 250, Twilio 201): ``sent``; its status comes later
    (provider callbacks move it to ``delivered`` or ``failed``)."""

    provider_id: str | None = None
    # Push: one ticket per device that took it, kept once the answer is recorded.
    tickets: tuple[Ticket, ...] = ()


@dataclass(frozen=True, slots=True)
class Refused:
    """Permanent (SMTP 5xx, Twilio 21211): ``failed`` with ``reason``.

    ``suppress`` names a suppression reason (``hard_bounce``, ``stop``, ``invalid``,
    ``complaint``) when the target itself is dead: the sender records the suppression so
    later messages to it are skipped ``suppressed``.
    """

    reason: str
    suppress: str | None = None


@dataclass(frozen=True, slots=True)
class Withheld:
    """Not sent: :attr:`Outgoing.still_sendable` said no after the adapter's wait. Nothing
    went out and nothing is recorded: the message stays ``sending``, and the sweeper's
    re-drive is its only copy."""


ChannelOutcome = Delivered | Accepted | TryAgain | Refused


class Channel(Protocol):
    """One channel's adapter. ``name`` is the channel (``push``, ``inbox``, ``email``, ...)."""

    name: str

    @property
    def max_batch(self) -> int:
        """Items per send call."""

    async def send(self, items: Sequence[Outgoing]) -> Sequence[ChannelOutcome | Withheld]:
        """One outcome per item, in order. Rate limits are the adapter's own; an adapter
        that waits asks each item's ``still_sendable`` after the wait (else Withheld)."""

    async def close(self) -> None: ...
