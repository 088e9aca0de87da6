"""A transport that fails after telling httpcore's trace hook how far the request got:
the adapters' ``SendProgress`` decides "not sent" or "maybe sent" from exactly that."""

from __future__ import annotations

import httpx

HEADERS_SENT = ["http11.send_request_headers.started", "http11.send_request_headers.complete"]
BODY_CUT_SHORT = [
    *HEADERS_SENT,
    "http11.send_request_body.started",
    "http11.send_request_body.failed",
]
BODY_SENT = [*HEADERS_SENT, "http11.send_request_body.started", "http11.send_request_body.complete"]


def trace_then_raise(events: list[str], error: Exception) -> httpx.MockTransport:
    """A transport that reports ``events`` to httpcore's trace hook, then raises ``error``."""

    async def handle(request: httpx.Request) -> httpx.Response:
        trace = request.extensions.get("trace")
        for event in events:
            if trace is not None:
                await trace(event, {})
        raise error

    return httpx.MockTransport(handle)
