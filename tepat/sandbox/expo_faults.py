"""Scripted faults of the Expo sandbox: refusals before accepting, and answers lost after.

Two families, because a client must treat them differently and cannot tell them apart:

* *before accepting* (:class:`FailNext`): the request is answered with an HTTP error and
  nothing is received. Sending again is safe.
* *after accepting* (:class:`LostAnswer`): the notifications are received and ticketed as
  usual, then the answer goes wrong (:class:`AfterAccept`). Sending again delivers a copy.
"""

from __future__ import annotations

import asyncio
import enum
import math
import threading
from dataclasses import dataclass
from typing import Any, TypeVar

from starlette.requests import Request
from starlette.responses import Response

from tepat.sandbox.expo_wire import request_errors


class AfterAccept(enum.StrEnum):
    """How an accepted send request's answer is lost."""

    STALL = "stall"  # no answer until the client gives up (its read timeout) or a release
    DROP = "drop"  # the connection closes in the middle of the response
    ERROR = "error"  # a 5xx instead of the tickets


@dataclass(slots=True)
class FailNext:
    status: int
    remaining: int
    retry_after: float | None
    code: str

    def response(self) -> Response:
        headers = {}
        if self.retry_after is not None:
            headers["Retry-After"] = str(math.ceil(self.retry_after))
        return request_errors(
            self.code, f"Scripted failure {self.status} {self.code}", self.status, **headers
        )


@dataclass(slots=True)
class LostAnswer:
    fault: AfterAccept
    remaining: int
    status: int  # for AfterAccept.ERROR

    async def lose(self, answer: Response, request: Request, stalls: Stalls) -> Response:
        """What the client gets instead of ``answer`` (or ``answer``, late, if released)."""
        if self.fault is AfterAccept.ERROR:
            return request_errors(
                "INTERNAL_SERVER_ERROR",
                f"Scripted failure {self.status} after accepting the request",
                self.status,
            )
        if self.fault is AfterAccept.DROP:
            return DroppedResponse()
        await stalls.hold(request)
        return answer


_Fault = TypeVar("_Fault", FailNext, LostAnswer)


def take_next(pending: list[_Fault]) -> _Fault | None:
    """Use up one request of the first scripted fault (the caller holds the lock)."""
    if not pending:
        return None
    fault = pending[0]
    fault.remaining -= 1
    if fault.remaining <= 0:
        pending.pop(0)
    return fault


class Stalls:
    """Answers being held back, so that a test (or shutdown) can release them."""

    def __init__(self, limit_seconds: float) -> None:
        # Wall-clock, not the sandbox's clock: it bounds a client that set no read timeout.
        self.limit_seconds = limit_seconds
        self._lock = threading.Lock()
        self._held: set[tuple[asyncio.AbstractEventLoop, asyncio.Event]] = set()

    def __len__(self) -> int:
        with self._lock:
            return len(self._held)

    async def hold(self, request: Request) -> None:
        """Return when the client hangs up, on :meth:`release_all`, or after the limit."""
        entry = (asyncio.get_running_loop(), asyncio.Event())
        with self._lock:
            self._held.add(entry)
        hang_up = asyncio.ensure_future(_client_disconnect(request))
        released = asyncio.ensure_future(entry[1].wait())
        try:
            await asyncio.wait(
                {hang_up, released}, timeout=self.limit_seconds, return_when="FIRST_COMPLETED"
            )
        finally:
            hang_up.cancel()
            released.cancel()
            with self._lock:
                self._held.discard(entry)

    def release_all(self) -> None:
        """Safe from any thread: the held answers go out (late) on their server's loop."""
        with self._lock:
            held = list(self._held)
        for loop, event in held:
            if not loop.is_closed():
                loop.call_soon_threadsafe(event.set)


async def _client_disconnect(request: Request) -> None:
    """Return once the client has closed the connection (the body is already read)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


class DroppedResponse(Response):
    """Starts a 200 and closes the connection halfway through its body.

    ASGI has no "reset the connection"; a server closes it when an application returns
    without finishing its response, which is the nearest thing a client can see.
    """

    def __init__(self) -> None:
        super().__init__(status_code=200, media_type="application/json")

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        body = b'{"data": [{"status": "ok", "id": "'
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body) * 4).encode()),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body, "more_body": True})
