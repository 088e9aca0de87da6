"""What an e-mail provider's status event does to messages and suppressions.

=========================== ====================================== =======================
event                       the message (forward-only)             the address
=========================== ====================================== =======================
Bounce, Permanent           ``sent`` -> ``failed`` ``hard_bounce``   suppressed hard_bounce
Bounce, Transient/other     unchanged (logged): the relay retries  not suppressed
Complaint                   unchanged                              suppressed complaint
Delivery                    ``sent`` -> ``delivered``              -
anything else               unchanged                              -
=========================== ====================================== =======================

Changes are conditional on ``sent``, so an event older than one already applied (a
Delivery after a Bounce, in any order) changes nothing. Only events about a Tepat e-mail
(by the id in its headers) touch anything, so a topic shared with other senders does not
suppress addresses for mail Tepat never sent; and only the message's own recipient is
suppressed, never other addresses an event names.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import structlog

from tepat.clock import Clock
from tepat.domain.contacts import SuppressionReason, normalise_email
from tepat.domain.email_events import EmailEvent
from tepat.domain.errors import DomainError
from tepat.domain.models import Message, MessageStatus
from tepat.ports.repositories.messages import StatusChange
from tepat.services.provider_events import CallbackRecords, act_then_record, suppress_recipient

log = structlog.get_logger("tepat.email_events")

CHANNEL = "email"


@dataclass(frozen=True, slots=True)
class Applied:
    outcome: str  # applied | duplicate | not_ours | ignored
    suppressed: list[str] = field(default_factory=list)


class EmailEvents:
    def __init__(self, store: CallbackRecords, clock: Clock) -> None:
        self.store = store
        self.clock = clock

    async def apply(self, provider: str, event_id: str, event: EmailEvent) -> Applied:
        handled = await act_then_record(
            self.store,
            provider,
            event_id,
            self.clock.now(),
            lambda: self._act(provider, event_id, event),
        )
        if handled.result is None or not handled.first:
            log.info("email_event_duplicate", provider=provider, event_id=event_id)
            return Applied("duplicate")
        return handled.result

    async def _act(self, provider: str, event_id: str, event: EmailEvent) -> Applied:
        if event.kind == "other":
            return Applied("ignored")
        logger = log.bind(provider=provider, event_id=event_id, type=event.type_name)
        message = await self.store.get_message(event.message_id) if event.message_id else None
        if message is None or message.channel != CHANNEL:
            logger.info("email_event_not_ours", message_id=event.message_id)
            return Applied("not_ours")
        changed = False
        suppressed: list[str] = []
        if event.kind == "bounce" and event.permanent:
            changed = await self._move(
                message.id, MessageStatus.FAILED, "hard_bounce", event.detail
            )
            suppressed = await self._suppress(
                message, event, SuppressionReason.HARD_BOUNCE, provider
            )
        elif event.kind == "bounce":
            log.info(
                "email_soft_bounce", message_id=message.id, detail=event.detail, provider=provider
            )
        elif event.kind == "complaint":
            suppressed = await self._suppress(message, event, SuppressionReason.COMPLAINT, provider)
        elif event.kind == "delivery":
            changed = await self._move(message.id, MessageStatus.DELIVERED, None, None)
        logger.info(
            "email_event", message_id=message.id, status_changed=changed, suppressed=len(suppressed)
        )
        return Applied("applied", suppressed)

    async def _move(
        self, message_id: str, to: MessageStatus, reason: str | None, last_error: str | None
    ) -> bool:
        change = StatusChange(message_id, to, reason=reason, last_error=last_error)
        now = self.clock.now()
        return await self.store.transition_many([change], now, expect=[MessageStatus.SENT]) > 0

    async def _suppress(
        self, message: Message, event: EmailEvent, reason: SuppressionReason, provider: str
    ) -> list[str]:
        done = []
        for raw in event.recipients:
            try:
                address = normalise_email(raw, "emailAddress")
            except DomainError:
                log.warning("email_event_bad_address", provider=provider, address=raw[:254])
                continue
            source = f"{provider}:{event.type_name}"
            if await suppress_recipient(
                self.store, message, address, reason, self.clock.now(), source
            ):
                done.append(address)
            else:
                log.warning(
                    "email_event_not_the_recipient", provider=provider, message_id=message.id
                )
        return done
