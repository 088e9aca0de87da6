"""The Channel port: hand rendered messages to one channel (inbox, email, SMS), typed outcomes.

Push (Expo) keeps its own port (:mod:`tepat.ports.push`): a push message fans out to
each of the user's active devices, is coalesced into requests of 100 across batches and
gets a ticket and a receipt later, so its dispatch path is specialised
(``tepat/services/sending/dispatcher.py``). Every other channel sends one message to one target, and
goes through this port and the one shared path in ``tepat/services/sending/channel_sender.py``:
claim (shared with push), the send-time checks, the target (the user's inbox, e-mail
address or phone number, resolved and checked against suppressions at send time), the
send, retries with backoff and the broker's dead-lettering (shared). Once answered,
every channel's messages, push included, are recorded by one recorder
(:mod:`tepat.services.sending.recording`) under one set of rules (:mod:`tepat.domain.outcomes`);
a temporary failure is the one :class:`~tepat.ports.try_again.TryAgain` of both ports.

An adapter never raises for a provider-side problem: it returns what happened, one
outcome per item, in order (docs/PRINCIPLES.md principle 4).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from tepat.domain.models import Message
from tepat.ports.try_again import TryAgain


@dataclass(frozen=True, slots=True)
class Outgoing:
    """One message to one target, with everything the adapter needs to send it.

    ``message`` carries the rendered parts pinned at creation: ``title`` (the e-mail
    subject, the inbox title), ``body`` (the text part, the SMS body) and
    ``message.content`` (``html``, ``link``: channel-specific parts). ``target`` is what
    the channel addresses: a user id (inbox), an e-mail address, an E.164 number.
    ``unsubscribe_url`` is set for bulk categories on channels that offer one-click
    unsubscribe (RFC 8058), signed for this (user, category, channel).
    """

    message: Message
    target: str
    unsubscribe_url: str | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)
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
    """One channel's adapter. ``name`` is the channel (``inbox``, ``email``, ``sms``)."""

    name: str
    max_batch: int  # items per send call

    async def send(self, items: Sequence[Outgoing]) -> Sequence[ChannelOutcome | Withheld]:
        """One outcome per item, in order. Rate limits are the adapter's own; an adapter
        that waits asks each item's ``still_sendable`` after the wait (else Withheld)."""

    async def close(self) -> None: ...
