"""``/v1/events``: business events in (admin API key or app keys), fanned out in the
background.

``POST`` answers at once (202) with a handle; ``GET /v1/events/{event_id}`` follows the
fan-out. The rules live in :mod:`tepat.services.events`; here only types and bounds, and
what an app key may do: post the types ``TEPAT_APP_EVENT_TYPES`` gives it (403 naming
``type`` otherwise), under its own id namespace, and read only its own events.
"""

from __future__ import annotations

from collections import Counter
from datetime import datetime
from typing import Annotated, Final

from fastapi import APIRouter, Path
from pydantic import BaseModel, Field

from api.auth import AuthError
from api.deps import Events, EventsCaller
from api.problems import problem_responses
from api.schemas import HHMM, Data, Identifier, LocalTime, OffsetDatetime, Text, read_fields
from api.schemas import Request as StrictRequest
from tepat.domain.events import MAX_USER_IDS, EventState, Outcome
from tepat.domain.models import MessageStatus
from tepat.domain.validation import IDENTIFIER_PATTERN
from tepat.services.events import EventRequest, EventStatus

PATH: Final = "/v1/events"
# MAX_USER_IDS ids of up to 128 characters, quoted and separated, with room for data.
MAX_BODY_BYTES: Final = MAX_USER_IDS * 131 + 64 * 1024

router = APIRouter(prefix=PATH, tags=["events"])


class EventIn(StrictRequest):
    event_id: Identifier = Field(
        description="Your id for the event: a repeat with the same body returns the same "
        "result and creates nothing; another body under it is a 409"
    )
    type: Annotated[Text, Field(min_length=1, max_length=128, examples=["order.paid"])] = Field(
        description="A configured event type (TEPAT_EVENT_TYPES)"
    )
    user_ids: list[Identifier] | None = Field(
        default=None,
        max_length=MAX_USER_IDS,
        description=f"The recipients (1 to {MAX_USER_IDS}); or all_users",
    )
    all_users: bool = Field(default=False, description="Every user (a campaign)")
    data: Data = Field(default_factory=dict, description="The templates' variables")
    occurred_at: OffsetDatetime = Field(description="When it happened")
    priority: Annotated[Text, Field(max_length=16)] | None = Field(
        default=None, description="critical, normal or bulk; the event type's by default"
    )
    send_at: OffsetDatetime | None = Field(
        default=None, description="Send at this instant (default: now)"
    )
    local_time: HHMM | None = Field(
        default=None,
        description='Send at each recipient\'s next "HH:MM" in their own zone (quiet hours '
        "apply as to reminders); not with send_at",
    )


class EventHandle(BaseModel):
    event_id: str
    type: str
    state: EventState
    status_url: str = Field(description="GET it to follow the fan-out")


class ChannelCounts(BaseModel):
    created: int = Field(description="Messages (push) or items (inbox) created")
    sent: int = Field(description="Push: accepted by Expo or delivered; inbox: stored")
    failed: int
    failed_reasons: dict[str, int] = Field(
        default_factory=dict, description="By reason (render_error, provider errors…)"
    )
    pending: int = Field(description="Not sent yet (push: pending or sending)")
    skipped: dict[str, int] = Field(description="By reason (not_routed: condition not met)")
    by_status: dict[str, int] = Field(default_factory=dict)


class EventStatusOut(BaseModel):
    event_id: str
    type: str
    category: str
    priority: str
    state: EventState = Field(description="fanning_out (or accepting), then done")
    recipients: int = Field(description="Recipients resolved so far (unknown ids included)")
    unknown_users: int
    listed: int = Field(description="Distinct user ids the request named (0 for all_users)")
    messages_created: int
    sent: int
    failed: int
    pending: int
    skipped: dict[str, int] = Field(description="By reason, every channel")
    channels: dict[str, ChannelCounts]
    occurred_at: datetime
    send_at: datetime | None
    local_time: LocalTime | None
    created_at: datetime | None
    updated_at: datetime | None


@router.post(
    "",
    status_code=202,
    responses=problem_responses(409),
    summary="Accept a business event; fan it out to its recipients in the background",
)
async def post_event(body: EventIn, caller: EventsCaller, service: Events) -> EventHandle:
    """202 with a handle at once, for a new event and for a repeat alike; the fan-out
    runs in the scheduler process (`tepat serve` or `tepat scheduler`). An app key's
    `event_id` is its own: another app may use the same one."""
    if not caller.may_post(body.type):
        raise AuthError(
            403, f"the app key {caller.poster!r} may not post {body.type!r} events", field="type"
        )
    event, _created = await service.accept(EventRequest(**body.model_dump(), app=caller.poster))
    # The event id as the caller named it (an app key's is stored under its app).
    url = f"{PATH}/{body.event_id}"
    return EventHandle(event_id=body.event_id, type=event.type, state=event.state, status_url=url)


EventIdPath = Annotated[
    str, Path(min_length=1, max_length=128, pattern=IDENTIFIER_PATTERN, examples=["ord-8841"])
]


@router.get(
    "/{event_id}",
    responses=problem_responses(404),
    summary="Follow an event's fan-out and outcomes",
)
async def get_event(event_id: EventIdPath, caller: EventsCaller, service: Events) -> EventStatusOut:
    """An app key reads only its own events (another's is a 404)."""
    return status_out(await service.status(event_id, caller.poster), event_id)


def status_out(status: EventStatus, event_id: str) -> EventStatusOut:
    e = status.event
    names = sorted(
        {channel for channel, _, _ in status.messages}
        | {k.split(":", 1)[0] for k in e.counts if ":" in k}
    )
    channels = {name: _channel_counts(status, name) for name in names}
    skipped: Counter[str] = Counter()
    for counts in channels.values():
        skipped.update(counts.skipped)
    fields = read_fields(
        EventStatusOut,
        e,
        event_id=event_id,
        unknown_users=e.counts.get(Outcome.UNKNOWN_USER.value, 0),
        messages_created=sum(c.created for c in channels.values()),
        sent=sum(c.sent for c in channels.values()),
        failed=sum(c.failed for c in channels.values()),
        pending=sum(c.pending for c in channels.values()),
        skipped=skipped,
        channels=channels,
    )
    return EventStatusOut(**fields)


def _channel_counts(status: EventStatus, channel: str) -> ChannelCounts:
    """One channel's messages by status, and the recipients its route did not take."""
    by_status: Counter[str] = Counter()
    failed: Counter[str] = Counter()
    skipped: Counter[str] = Counter()
    for (ch, s, reason), n in status.messages.items():
        if ch != channel:
            continue
        by_status[s] += n
        if s == MessageStatus.FAILED:
            failed[reason] += n
        elif s in (MessageStatus.SKIPPED, MessageStatus.MISSED, MessageStatus.CANCELLED):
            skipped[reason or s] += n
    prefix = f"{channel}:"
    for key, n in status.event.counts.items():
        # Decided at fan-out, so never a message: a route not taken (and, for events
        # fanned out before every channel became messages, the inbox's outcomes).
        if key.startswith(prefix) and n:
            outcome = key.removeprefix(prefix)
            if outcome == Outcome.DELIVERED.value:
                by_status["delivered"] += n
            elif outcome == Outcome.RENDER_ERROR.value:
                by_status["failed"] += n
                failed[outcome] += n
            else:
                skipped[outcome] += n
    return ChannelCounts(
        created=sum(by_status.values()),
        sent=by_status.get(MessageStatus.SENT, 0) + by_status.get(MessageStatus.DELIVERED, 0),
        failed=sum(failed.values()),
        failed_reasons=failed,
        pending=by_status.get(MessageStatus.PENDING, 0) + by_status.get(MessageStatus.SENDING, 0),
        skipped=skipped,
        by_status=by_status,
    )
