"""``/v1/users/{user_id}/inbox``: the in-app inbox, its unread count, reads and live stream.

The stream is Server-Sent Events: each item is an ``inbox`` event whose ``id:`` is the
highest seq sent so far, so a client that reconnects with ``Last-Event-ID`` (browsers do
it by themselves) gets exactly what it missed. See tepat/services/inbox.py for how the
stream wakes, and README "In-app inbox" for use.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Annotated, Any

from fastapi import Body, Header, Query, Response
from fastapi.responses import StreamingResponse

from api.deps import Admin, Inbox, UserId, answer_created, id_path, user_router
from api.problems import ProblemError, problem_responses
from api.schemas import (
    InboxItemIn,
    InboxItemOut,
    InboxPageOut,
    ReadAllIn,
    ReadAllOut,
    UnreadCountOut,
)
from tepat.domain.inbox import InboxItem, parse_seq
from tepat.services.inbox import TooManyStreams

router = user_router("/inbox", tag="inbox")

ItemId = Annotated[str, id_path("The item's `id`", "inb_3f2a9c")]
SSE_MEDIA_TYPE = "text/event-stream"
# Tells a reconnecting EventSource to wait this long (ms) rather than its own default.
SSE_RETRY_MS = 3000


@router.get("", summary="List the user's inbox, newest first")
async def list_inbox(
    user_id: UserId,
    service: Inbox,
    cursor: Annotated[
        str | None, Query(max_length=32, description="`next_cursor` of the previous page")
    ] = None,
    limit: Annotated[int, Query(ge=1, le=200, description="Page size")] = 50,
    unread: Annotated[bool, Query(description="Only items not read yet")] = False,
) -> InboxPageOut:
    page = await service.page(user_id, cursor, limit, unread)
    return InboxPageOut(
        items=[InboxItemOut.of(i) for i in page.items],
        next_cursor=page.next_cursor,
        unread_count=page.unread_count,
    )


@router.get("/unread-count", summary="How many items are unread")
async def unread_count(user_id: UserId, service: Inbox) -> UnreadCountOut:
    return UnreadCountOut(unread_count=await service.unread_count(user_id))


@router.post("/{item_id}/read", summary="Mark one item read (forward-only)")
async def read_item(user_id: UserId, item_id: ItemId, service: Inbox) -> InboxItemOut:
    """Reading an item again keeps its first `read_at`. Another user's item is a 404."""
    return InboxItemOut.of(await service.read(user_id, item_id))


@router.post("/read-all", summary="Mark every unread item read")
async def read_all(
    user_id: UserId, service: Inbox, body: Annotated[ReadAllIn | None, Body()] = None
) -> ReadAllOut:
    """Every item stored so far, or only those up to `up_to_seq` (the newest the app has
    shown, so an item arriving meanwhile stays unread)."""
    marked = await service.read_all(user_id, body.up_to_seq if body else None)
    return ReadAllOut(marked=marked, unread_count=await service.unread_count(user_id))


@router.post(
    "",
    status_code=201,
    responses={
        200: {"model": InboxItemOut, "description": "Already stored with this idempotency_key"}
    },
    summary="Put an item in the user's inbox (admin; superseded by POST /v1/events)",
)
async def put_item(
    user_id: UserId, body: InboxItemIn, _: Admin, service: Inbox, response: Response
) -> InboxItemOut:
    """Until events reach the inbox, this is how an item gets there. Idempotent on
    `idempotency_key` (the item's message id): a repeat returns the stored item (200)."""
    delivered = await service.deliver(
        user_id, **body.model_dump(exclude={"idempotency_key"}), message_id=body.idempotency_key
    )
    answer_created(response, delivered.created)
    return InboxItemOut.of(delivered.item)


@router.get(
    "/stream",
    response_class=StreamingResponse,
    response_model=None,
    responses={
        200: {
            "content": {SSE_MEDIA_TYPE: {"schema": {"type": "string"}}},
            "description": "Server-Sent Events: `event: inbox`, `id:` the seq, `data:` an "
            "InboxItemOut as JSON; `: keepalive` comments between",
        },
        **problem_responses(503),
    },
    summary="Live stream of new inbox items (Server-Sent Events)",
)
async def stream(
    user_id: UserId,
    service: Inbox,
    last_event_id_header: Annotated[
        str | None,
        Header(
            alias="Last-Event-ID",
            max_length=32,
            description="Resume after this seq (sent by EventSource on reconnect)",
        ),
    ] = None,
    last_event_id: Annotated[
        str | None,
        Query(max_length=32, description="Resume after this seq (when no header can be set)"),
    ] = None,
    access_token: Annotated[
        str | None,
        Query(
            max_length=8192,
            description="The user's JWT, for clients that cannot send headers (EventSource). "
            "It ends up in access logs: prefer the header, or use short-lived tokens.",
        ),
    ] = None,
) -> StreamingResponse:
    """Items stored after `Last-Event-ID` (header first, then `last_event_id`; none:
    only new items), each once, then live. Heartbeat comments keep proxies from closing
    an idle stream. The stream ends when the server shuts down; reconnect to resume.
    A user with `TEPAT_INBOX_MAX_STREAMS_PER_USER` streams open gets 429, a server with
    `TEPAT_INBOX_MAX_STREAMS` 503, both with `Retry-After`."""
    if last_event_id_header is not None:
        after = parse_seq(last_event_id_header.strip(), "Last-Event-ID")
    elif last_event_id is not None:
        after = parse_seq(last_event_id, "last_event_id")
    else:
        after = None
    if after is None:  # only what arrives from now on
        after = await service.newest_seq(user_id)
    items = await service.open_stream(user_id, after)
    try:
        release = service.notifier.reserve(user_id)
    except TooManyStreams as e:
        status, wait = 429 if e.per_user else 503, str(e.retry_after)
        raise ProblemError(status, e.message, headers={"Retry-After": wait}) from None
    return _Stream(
        release,
        _events(items, after),
        media_type=SSE_MEDIA_TYPE,
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


class _Stream(StreamingResponse):
    """Gives the stream's slot back however the response ends (even before it starts)."""

    def __init__(self, release: Callable[[], None], *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._release = release

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self._release()


async def _events(items: AsyncIterator[InboxItem | None], position: int) -> AsyncIterator[str]:
    yield f"retry: {SSE_RETRY_MS}\n: connected\n\n"
    async for item in items:
        if item is None:
            yield ": keepalive\n\n"
            continue
        # A late commit (seq below one already sent) keeps the id where it was: the id
        # is where to resume, and everything up to it has been sent.
        position = max(position, item.seq)
        data = InboxItemOut.of(item).model_dump_json()
        yield f"id: {position}\nevent: inbox\ndata: {data}\n\n"
