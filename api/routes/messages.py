"""``/v1/users/{user_id}/notifications`` (one-offs) and ``/v1/users/{user_id}/messages``."""

from __future__ import annotations

import re
from typing import Annotated

import structlog
from fastapi import Query, Response
from pydantic import BeforeValidator

from api.auth import AuthError
from api.deps import RT, Caller, UserId, answer_created, user_router
from api.pagination import Cursor
from api.problems import problem_responses
from api.schemas import MessageOut, MessagePage, NotificationIn, NotificationOut, OffsetDatetime
from tepat.domain.models import MessageStatus
from tepat.ports.repositories.messages import MessageQuery
from tepat.services import accounts

router = user_router("", tag="messages")


@router.post(
    "/notifications",
    status_code=201,
    responses={
        200: {"model": NotificationOut, "description": "Already created with this idempotency_key"},
        **problem_responses(409),
    },
    summary="Send a one-off notification, now or at send_at",
)
async def post_notification(
    user_id: UserId, body: NotificationIn, rt: RT, response: Response, caller: Caller
) -> NotificationOut:
    """Idempotent on `idempotency_key`: repeating the request returns the same message
    (200) and it is sent once; the same key with a different request is a 409.

    A backend operation (the admin key): a user token gets 403 unless the deployment sets
    `TEPAT_ALLOW_USER_NOTIFICATIONS=true` (a user sending to themselves)."""
    if caller.user_id is not None and not rt.settings.allow_user_notifications:
        raise AuthError(
            403,
            "one-off notifications are sent by the backend (admin key); this server does"
            " not let users send them (TEPAT_ALLOW_USER_NOTIFICATIONS)",
        )
    message, created = await accounts.create_oneoff(rt, user_id, **body.model_dump())
    # on this request's access line (api/request_id.py): the line that created it names it
    structlog.contextvars.bind_contextvars(
        message_id=message.id, user_id=user_id, channel=message.channel
    )
    answer_created(response, created)
    return NotificationOut.of(message)


_SPACE_FOR_PLUS = re.compile(r" (?=\d\d:?\d\d$)")


def _plus_restored(value: object) -> object:
    """An unencoded "+07:00" in a query string arrives as " 07:00": take it as meant."""
    return _SPACE_FOR_PLUS.sub("+", value) if isinstance(value, str) else value


QueryDatetime = Annotated[OffsetDatetime, BeforeValidator(_plus_restored)]


@router.get("/messages", summary="List the user's messages")
async def list_messages(
    user_id: UserId,
    rt: RT,
    status: Annotated[
        list[MessageStatus] | None,
        Query(description="Only these statuses (repeat the parameter for several)"),
    ] = None,
    from_: Annotated[
        QueryDatetime | None,
        Query(alias="from", description="Scheduled at or after (ISO 8601 with offset)"),
    ] = None,
    to: Annotated[
        QueryDatetime | None,
        Query(description="Scheduled before (ISO 8601 with offset)"),
    ] = None,
    limit: Annotated[int, Query(ge=1, le=200, description="Page size")] = 50,
    cursor: Cursor = None,
) -> MessagePage:
    """Newest scheduled first."""
    query = MessageQuery(
        user_id=user_id,
        statuses=frozenset(status or ()),
        scheduled_from=from_,
        scheduled_to=to,
        limit=limit,
        cursor=cursor,
    )
    page = await accounts.list_messages(rt, query)
    return MessagePage(
        messages=[MessageOut.of(m) for m in page.items], next_cursor=page.next_cursor
    )
