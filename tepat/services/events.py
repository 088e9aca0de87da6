"""Events in, messages out (issue 12, part 1): accept, fan out, report.

:meth:`EventService.accept` stores the event (and its listed recipients) once per
``event_id`` and returns at once; the fan-out loop (``scheduler/jobs.py``) then pages
through the recipients in user-id order (:meth:`EventService.fan_out_page`): one
idempotent bulk insert of the page's messages, and only then the event's cursor moves,
compare-and-set. A crash before the move does the page again: the keys make every write
a no-op the second time and the counts are added once, with the cursor.

Messages are stored rendered with the pinned template version, so a retry sends the
same text. A render error (or no template in the locale chain) is that recipient's
message stored ``failed``/``render_error``; the event carries on.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, time
from typing import Any, Final, Protocol

import structlog

from tepat.clock import Clock
from tepat.domain.categories import Categories
from tepat.domain.errors import DomainError, enum_member
from tepat.domain.events import (
    MAX_DATA_BYTES,
    MAX_USER_IDS,
    Event,
    Outcome,
    count_key,
    plan_event_message,
)
from tepat.domain.locales import fallback_chain
from tepat.domain.models import Message, User
from tepat.domain.planning import _whole_ms_up, request_fingerprint
from tepat.domain.routing import (
    PRIORITY_ERROR,
    Channel,
    Condition,
    EventTypes,
    Priority,
    Route,
    select_channels,
)
from tepat.domain.templates import Rendered
from tepat.domain.validation import check_identifier, format_hhmm, parse_hhmm
from tepat.ports.repositories.devices import DeviceRepository
from tepat.ports.repositories.events import EventRepository
from tepat.ports.repositories.messages import MessageRepository
from tepat.ports.repositories.users import UserRepository
from tepat.services.accounts import IdempotencyConflict, NotFound, check_send_at
from tepat.services.outbox import Outbox
from tepat.services.templates import TemplateService

log = structlog.get_logger("tepat.events")

#: Recipients per page: one read of users, devices and preferences, one bulk insert.
PAGE_SIZE: Final = 500
#: Events worked on per pass of the loop (each a page at a time, in turn).
EVENTS_PER_PASS: Final = 10


@dataclass(frozen=True, slots=True)
class EventRequest:
    """``POST /v1/events`` as the API parsed it (types checked, rules not yet)."""

    event_id: str
    type: str
    data: Mapping[str, Any]
    occurred_at: datetime
    user_ids: Sequence[str] | None = None
    all_users: bool = False
    priority: str | None = None
    send_at: datetime | None = None
    local_time: str | None = None
    # The app key that posts it (TEPAT_APP_KEYS); None for the admin key.
    app: str | None = None


MAX_EVENT_ID = 128


def scoped_event_id(app: str | None, event_id: str) -> str:
    """The stored id: an app key's ids live under ``<app>:``, so one app can neither read
    nor claim another's (the admin key's ids are stored as given, and the admin reads an
    app's event as ``<app>:<event_id>``)."""
    check_identifier(event_id, "event_id")
    if app is None:
        return event_id
    if len(app) + 1 + len(event_id) > MAX_EVENT_ID:
        raise DomainError(
            "event_id",
            f"at most {MAX_EVENT_ID - len(app) - 1} characters with the app key {app!r}"
            f" (stored as '{app}:<event_id>')",
        )
    return f"{app}:{event_id}"


@dataclass(frozen=True, slots=True)
class EventStatus:
    event: Event
    # The event's messages in the store by (channel, status, reason or "").
    messages: Mapping[tuple[str, str, str], int] = field(default_factory=dict)


@dataclass(slots=True)
class _Page:
    """What one page decided, before it is written."""

    messages: list[Message] = field(default_factory=list)
    counts: Counter[str] = field(default_factory=Counter)


class EventRecords(
    EventRepository, UserRepository, DeviceRepository, MessageRepository, Protocol
): ...


@dataclass(eq=False)
class EventService:
    store: EventRecords
    clock: Clock
    categories: Categories
    event_types: EventTypes
    templates: TemplateService
    outbox: Outbox
    page_size: int = PAGE_SIZE

    async def accept(self, req: EventRequest) -> tuple[Event, bool]:
        """Store the event once per ``event_id``: ``(event, created)``. The same id with
        another request is an :class:`IdempotencyConflict`."""
        event_id = scoped_event_id(req.app, req.event_id)
        etype = self.event_types.get(req.type, "type")
        ids = _check_recipients(req.user_ids, req.all_users)
        data = _check_data(req.data)
        priority = etype.priority
        if req.priority is not None:
            priority = enum_member(Priority, req.priority, "priority", PRIORITY_ERROR)
        now = self.clock.now()
        send_at, local_time = _check_when(req.send_at, req.local_time, now)
        occurred_at = req.occurred_at.astimezone(UTC)
        request_hash = request_fingerprint(
            {
                "type": etype.name,
                "user_ids": ids,
                "all_users": req.all_users,
                "data": data,
                "occurred_at": occurred_at.isoformat(),
                "priority": priority.value,
                "send_at": send_at.isoformat() if send_at else None,
                "local_time": format_hhmm(local_time) if local_time else None,
            }
        )
        event = Event(
            event_id=event_id,
            type=etype.name,
            category=etype.category,
            priority=priority,
            request_hash=request_hash,
            all_users=req.all_users,
            data=data,
            occurred_at=occurred_at,
            send_at=send_at,
            local_time=local_time,
            listed=len(ids),
        )
        stored, created = await self.store.create_event(event, ids)
        if stored.request_hash != request_hash:
            raise IdempotencyConflict(
                f"event_id {req.event_id!r} was already used with a different request"
            )
        return stored, created

    async def status(self, event_id: str, app: str | None = None) -> EventStatus:
        """``app``: only that app's events (another's is NotFound, as if absent)."""
        stored_id = scoped_event_id(app, event_id)
        event = await self.store.get_event(stored_id)
        if event is None:
            raise NotFound("event", event_id)
        return EventStatus(event, await self.store.event_message_counts(stored_id))

    async def fan_out_once(self) -> int:
        """One page of each event still fanning out; how many pages were done."""
        pages = 0
        for event in await self.store.events_fanning_out(EVENTS_PER_PASS):
            try:
                await self.fan_out_page(event)
                pages += 1
            except Exception:
                # One event's trouble (a store error) must not hold up the others; its
                # cursor did not move, so the page is done again on the next pass.
                log.exception("event fan-out failed", event_id=event.event_id)
        return pages

    async def fan_out_until_idle(self) -> int:
        """Every page of every event (tests, and a loop catching up); how many."""
        total = 0
        while pages := await self.fan_out_once():
            total += pages
        return total

    async def fan_out_page(self, event: Event) -> bool:
        """The next page of ``event``; whether this call moved its cursor."""
        ids = await self.store.event_recipients(
            event.event_id, event.all_users, event.cursor, self.page_size
        )
        now = self.clock.now()
        if not ids:
            return await self.store.advance_event(
                event.event_id, event.cursor, event.cursor, 0, {}, True, now
            )
        page = await self._plan_page(event, ids, now)
        if page.messages:
            # The planner's path: one bulk insert; an existing key is counted, not raised.
            await self.store.insert_messages(page.messages)
        moved = await self.store.advance_event(
            event.event_id,
            event.cursor,
            ids[-1],
            len(ids),
            page.counts,
            len(ids) < self.page_size,
            now,
        )
        if page.messages:
            await self.outbox.flush_soon()
        return moved

    async def _plan_page(self, event: Event, ids: list[str], now: datetime) -> _Page:
        page = _Page()
        routes: tuple[Route, ...] = ()
        if event.type in self.event_types and event.category in self.categories:
            routes = self.event_types.get(event.type).routes
        else:
            log.warning("event type or category no longer configured", event_id=event.event_id)
        channels = {r.channel for r in routes}
        users = await self.store.get_users(ids)
        needs_devices = Channel.PUSH in channels or any(
            r.when is not Condition.ALWAYS for r in routes
        )
        devices = await self.store.active_devices(ids) if needs_devices else {}
        renders: dict[tuple[Channel, str], Rendered | str] = {}
        for user_id in ids:
            user = users.get(user_id)
            if user is None:
                page.counts[count_key(None, Outcome.UNKNOWN_USER)] += 1
                continue
            chosen = select_channels(routes, has_active_device=bool(devices.get(user_id)))
            for route in routes:
                if route.channel not in chosen:
                    page.counts[count_key(route.channel, Outcome.NOT_ROUTED)] += 1
            for channel in chosen:
                rendered = await self._render(event, channel, user.locale, renders)
                page.messages.append(self._message(event, user, channel, rendered, now))
        return page

    def _message(
        self, event: Event, user: User, channel: Channel, rendered: Rendered | str, now: datetime
    ) -> Message:
        """Stored rendered with the pinned version; the send-time checks come later."""
        policy = self.categories.get(event.category)
        error: str | None = None
        if isinstance(rendered, str):
            error, rendered = rendered, Rendered(channel, "", "")
        content = {k: v for k, v in (("html", rendered.html), ("link", rendered.link)) if v}
        parts = (rendered.title, rendered.body, rendered.data)
        return plan_event_message(
            event, user, policy, channel, *parts, now, content=content, render_error=error
        )

    async def _render(
        self,
        event: Event,
        channel: Channel,
        locale: str,
        renders: dict[tuple[Channel, str], Rendered | str],
    ) -> Rendered | str:
        """The rendered parts for ``locale``, or why not (render_error): one render per
        (channel, locale) serves the page, the data being the same for every recipient."""
        if (channel, locale) in renders:
            return renders[(channel, locale)]
        pinned = await self.templates.resolve(event.type, channel, locale)
        result: Rendered | str
        if pinned is None:
            tried = ", ".join(fallback_chain(locale, self.templates.default_locale))
            result = f"no {channel.value} template for {event.type} in any of {tried}"
        else:
            try:
                result = await self.templates.render_pinned(pinned.template_id, event.data)
            except DomainError as e:  # TemplateError: reason render_error
                result = f"{pinned.template_id}: {e}"
        renders[(channel, locale)] = result
        return result


def _check_recipients(user_ids: Sequence[str] | None, all_users: bool) -> list[str]:
    if all_users:
        if user_ids:
            raise DomainError("user_ids", "give user_ids or all_users: true, not both")
        return []
    if not user_ids:
        raise DomainError("user_ids", f"give 1 to {MAX_USER_IDS} user ids, or all_users: true")
    if len(user_ids) > MAX_USER_IDS:
        raise DomainError(
            "user_ids", f"at most {MAX_USER_IDS} ids (send more with all_users or more events)"
        )
    for i, user_id in enumerate(user_ids):
        check_identifier(user_id, f"user_ids.{i}")
    return sorted(set(user_ids))


def _check_data(data: Mapping[str, Any]) -> dict[str, Any]:
    try:
        text = json.dumps(dict(data), ensure_ascii=False, allow_nan=False, separators=(",", ":"))
        size = len(text.encode())
    except (ValueError, TypeError, RecursionError):
        raise DomainError("data", "must be valid JSON (no NaN, no lone surrogates)") from None
    if size > MAX_DATA_BYTES:
        raise DomainError("data", f"at most {MAX_DATA_BYTES} bytes as JSON, got {size}")
    return dict(json.loads(text))


def _check_when(
    send_at: datetime | None, local_time: str | None, now: datetime
) -> tuple[datetime | None, time | None]:
    if send_at is not None and local_time is not None:
        raise DomainError("local_time", "give send_at or local_time, not both")
    if local_time is not None:
        return None, parse_hhmm(local_time, "local_time")
    utc = check_send_at(send_at, now)
    # Rounded up before it is stored: a BSON date would cut it down, and the event
    # would then be sent up to a millisecond early (as for a one-off's send_at).
    return (None if utc is None else _whole_ms_up(utc)), None
