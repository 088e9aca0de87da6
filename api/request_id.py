"""Every request gets an id, carried by every log line the request causes.

The id is the client's ``X-Request-ID`` when it is a plausible one (a proxy or the
caller's own tracing may set it), else a new one; it goes back in the response's
``X-Request-ID``. Bound in structlog's context variables, it is on the access line and
on every line logged while the request runs; a route may bind more (the one-off route
binds the ``message_id`` it created), so the access line of the request that created a
message names it.
"""

from __future__ import annotations

import random
import re

import structlog
from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

HEADER = "X-Request-ID"
# Printable and short: it is written into log lines and echoed in a header.
_PLAUSIBLE = re.compile(r"[A-Za-z0-9._:-]{1,64}")


def request_id_of(scope: Scope) -> str:
    for name, value in scope.get("headers", ()):
        if name == b"x-request-id":
            given: str = value.decode("latin-1")
            if _PLAUSIBLE.fullmatch(given):
                return given
            break
    # Unique, not secret: 128 random bits without uuid4's system call per request.
    return f"{random.getrandbits(128):032x}"


class RequestIdMiddleware:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request_id = request_id_of(scope)

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                MutableHeaders(scope=message).append(HEADER, request_id)
            await send(message)

        # uvicorn runs each request in a task of its own, but an in-process client (the
        # tests' ASGI transport) runs them all in one: start clean, leave clean.
        structlog.contextvars.clear_contextvars()
        structlog.contextvars.bind_contextvars(request_id=request_id)
        try:
            await self.app(scope, receive, send_with_id)
        finally:
            structlog.contextvars.clear_contextvars()
