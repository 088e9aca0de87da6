"""What Twilio's callbacks do to the store: SMS status changes and STOP/START replies.

The route has already checked the signature. Every status change is conditional on the
current status (:func:`change_for`), so a repeated or older callback changes nothing.
``delivered`` applies from ``sending`` and ``pending`` too (the callback beat the
sender's own record, or the answer was lost and a retry waits: the truth wins);
``failed`` does not apply to a message waiting for a retry, which may still get through.

A callback acts only on the SMS it names (once the message holds Twilio's SID, that
SID). A dead-number error suppresses only ``To`` when it is the message's recipient;
also when the failure landed before (a process died between the two writes).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime

import structlog

from tepat.clock import Clock
from tepat.domain.contacts import SuppressionReason, normalise_phone
from tepat.domain.errors import DomainError
from tepat.domain.models import Message, MessageStatus
from tepat.ports.repositories.contacts import ContactRepository
from tepat.ports.repositories.messages import MessageRepository, StatusChange
from tepat.services.provider_events import CallbackRecords, act_then_record, suppress_recipient

log = structlog.get_logger("tepat.twilio")

PROVIDER = "twilio"
SMS = "sms"
STOP_WORDS = frozenset({"STOP", "STOPALL", "UNSUBSCRIBE", "CANCEL", "END", "QUIT"})
START_WORDS = frozenset({"START", "YES", "UNSTOP"})
# Delivery errors that mean the number cannot receive SMS at all.
DEAD_NUMBER_ERRORS = frozenset({"30005", "30006"})

_DELIVERED_FROM = [MessageStatus.SENT, MessageStatus.SENDING, MessageStatus.PENDING]
_FAILED_FROM = [MessageStatus.SENT, MessageStatus.SENDING]


class Outcome(enum.StrEnum):
    APPLIED = "applied"  # the message moved
    NO_CHANGE = "no_change"  # a status that changes nothing (queued, sent, ...)
    STALE = "stale"  # the message is already past it: repeated or out of order
    UNKNOWN_MESSAGE = "unknown_message"
    DUPLICATE = "duplicate"  # seen before, and nothing left to do


@dataclass(frozen=True, slots=True)
class StatusCallback:
    message_id: str | None  # the ``m`` of the StatusCallback URL
    sid: str
    status: str
    error_code: str | None
    to: str | None

    @classmethod
    def from_params(cls, message_id: str | None, params: Mapping[str, str]) -> StatusCallback:
        """Twilio's form fields (unknown ones ignored); DomainError naming a missing one."""
        sid = (params.get("MessageSid") or params.get("SmsSid") or "").strip()
        status = (params.get("MessageStatus") or params.get("SmsStatus") or "").strip().lower()
        if not sid:
            raise DomainError("MessageSid", "is required")
        if not status:
            raise DomainError("MessageStatus", "is required")
        error_code = (params.get("ErrorCode") or "").strip() or None
        return cls(message_id or None, sid, status, error_code, params.get("To"))


def change_for(callback: StatusCallback) -> tuple[StatusChange, list[MessageStatus]] | None:
    """The conditional change a callback asks for, or None when it asks for none."""
    if callback.message_id is None:
        return None
    if callback.status == "delivered":
        return StatusChange(callback.message_id, MessageStatus.DELIVERED), _DELIVERED_FROM
    if callback.status in ("undelivered", "failed"):
        reason = f"twilio_{callback.error_code or callback.status}"
        detail = f"Twilio: {callback.status}" + (
            f" (error {callback.error_code})" if callback.error_code else ""
        )
        change = StatusChange(
            callback.message_id, MessageStatus.FAILED, reason=reason, last_error=detail
        )
        return change, _FAILED_FROM
    return None


async def apply_status(store: CallbackRecords, clock: Clock, callback: StatusCallback) -> Outcome:
    now = clock.now()
    event_id = f"{callback.sid}:{callback.status}"
    planned = change_for(callback)
    if planned is None:
        if callback.message_id is None:
            log.warning("Twilio status callback without a message id", sid=callback.sid)
            return Outcome.UNKNOWN_MESSAGE
        return Outcome.NO_CHANGE
    change, expect = planned
    logger = log.bind(message_id=callback.message_id, status=callback.status)
    message = await store.get_message(change.message_id)
    # Only the SMS it names: once the message holds Twilio's SID, that SID.
    if message is None or message.channel != SMS or message.ticket_id not in (None, callback.sid):
        logger.warning("Twilio status callback for an unknown message", sid=callback.sid)
        return Outcome.UNKNOWN_MESSAGE

    async def act() -> bool:
        applied = await store.transition_many([change], now, expect=expect) > 0
        dead_number = callback.error_code in DEAD_NUMBER_ERRORS and callback.to
        if dead_number and (applied or await _failed_by(store, change)):
            await _suppress_dead_number(store, message, callback, now)
        return applied

    handled = await act_then_record(store, PROVIDER, event_id, now, act)
    if handled.result:
        logger.info("SMS status from Twilio", error_code=callback.error_code)
        return Outcome.APPLIED
    # Not acted on (recorded before), or nothing moved: a repeat, or older than the status.
    return Outcome.STALE if handled.first else Outcome.DUPLICATE


async def _failed_by(store: MessageRepository, change: StatusChange) -> bool:
    """Whether the message already holds this failure: the change landed before."""
    message = await store.get_message(change.message_id)
    return (
        message is not None
        and message.status is MessageStatus.FAILED
        and message.status_reason == change.reason
    )


async def _suppress_dead_number(
    store: ContactRepository, message: Message, callback: StatusCallback, now: datetime
) -> None:
    try:
        number = normalise_phone(callback.to, "To")
    except DomainError:
        return
    if not await suppress_recipient(
        store, message, number, SuppressionReason.INVALID, now, source=PROVIDER
    ):
        log.warning("Twilio callback names another number than the message's recipient")


class Reply(enum.StrEnum):
    STOPPED = "stopped"
    STARTED = "started"
    IGNORED = "ignored"


async def apply_inbound(store: ContactRepository, clock: Clock, params: Mapping[str, str]) -> Reply:
    """A reply from a phone: STOP words suppress its number, START words lift that."""
    word = (params.get("Body") or "").strip().upper()
    if word not in STOP_WORDS and word not in START_WORDS:
        return Reply.IGNORED
    try:
        number = normalise_phone(params.get("From") or "", "From")
    except DomainError as e:
        log.warning("Twilio inbound message from an unusable number", error=e.message)
        return Reply.IGNORED
    if word in STOP_WORDS:
        await store.add_suppression(
            SMS, number, SuppressionReason.STOP, clock.now(), source=PROVIDER
        )
        log.info("SMS opt-out (STOP) from Twilio", keyword=word)
        return Reply.STOPPED
    await store.lift_suppression(SMS, number, SuppressionReason.STOP)
    log.info("SMS opt-in (START) from Twilio", keyword=word)
    return Reply.STARTED
