"""The one order in which every provider callback is handled: look, act, record.

Providers (SES over SNS, a signed relay, Twilio) deliver each event at least once. So an
event is:

1. looked up: one already recorded is not acted on again (a replay, even long after a
   suppression it caused was lifted, changes nothing);
2. acted on, idempotently (a process that dies before 3 leaves the event unrecorded and
   the retry acts again): a suppression added twice is one, and a status only moves
   forward, so a change that already landed finds nothing to do;
3. recorded, last: recording first would turn the retry of a process that died in
   between into a "duplicate" and lose the bounce or complaint.

Two processes handed the same event at once both act (harmless); the record tells them
apart.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Generic, Protocol, TypeVar

from tepat.domain.contacts import SuppressionReason
from tepat.domain.models import Message
from tepat.ports.repositories.contacts import ContactRepository
from tepat.ports.repositories.messages import MessageRepository
from tepat.ports.repositories.provider_events import ProviderEventRepository

T = TypeVar("T")


class CallbackRecords(MessageRepository, ContactRepository, ProviderEventRepository, Protocol): ...


@dataclass(frozen=True, slots=True)
class Handled(Generic[T]):
    result: T | None  # what the act returned; None: recorded before, not acted on
    first: bool  # this call recorded the event (False: a repeat, or a concurrent twin)


async def act_then_record(
    events: ProviderEventRepository,
    provider: str,
    event_id: str,
    now: datetime,
    act: Callable[[], Awaitable[T]],
) -> Handled[T]:
    if await events.provider_event_seen(provider, event_id):
        return Handled(None, first=False)
    result = await act()
    return Handled(result, await events.record_provider_event(provider, event_id, now))


async def suppress_recipient(
    store: ContactRepository,
    message: Message,
    address: str,
    reason: SuppressionReason,
    now: datetime,
    source: str,
) -> bool:
    """Suppress ``address`` (normalised) on the message's channel if it is the message's
    own recipient (its user's contact); whether it was."""
    contacts = await store.contacts_for_users([message.user_id], message.channel)
    contact = contacts.get(message.user_id)
    if contact is None or contact.address != address:
        return False
    await store.add_suppression(message.channel, address, reason, now, source=source)
    return True
