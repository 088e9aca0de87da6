"""Scripted faults of the sandboxes: refusals before accepting, and answers lost after.

Two families, because a client must treat them differently and cannot tell them apart:

* *before accepting* (:class:`FailNext`, worded as its provider does): the request
  is answered with an HTTP error and nothing is received. Sending again is safe.
* *after accepting* (:class:`LostAnswer`): the request is received and handled as usual,
  then the answer goes wrong (:class:`AfterAccept`). Sending again delivers a copy.

Both wait in a :class:`FaultQueue` until requests use them up.
"""

from __future__ import annotations

import asyncio
import enum
import threading
from dataclasses import asdict, dataclass, field
from typing import Any, TypeVar

from starlette.requests import Request
from starlette.responses import Response


class AfterAccept(enum.StrEnum):
    STALL = "stall"  # no answer until the client gives up (its read timeout) or a release
    DROP = "drop"  # the connection closes in the middle of the response
    ERROR = "error"  # a 5xx instead of the tickets


@dataclass(slots=True)
class LostAnswer:
    fault: AfterAccept
    remaining: int
    status: int  # for AfterAccept.ERROR


@dataclass(slots=True)
class FailNext:
    """A refusal before accepting: HTTP ``status`` to the next ``remaining`` requests, with
    the ``Retry-After`` and error ``code`` of the provider that words them (Expo)."""

    status: int
    remaining: int
    retry_after: float | None = None
    code: str | None = None


@dataclass(slots=True)
class FaultQueue:
    """The faults scripted for the next requests, each used up one request at a time.

    Not locked: it lives in its sandbox's state, under that sandbox's lock.
    """

    refusals: list[FailNext] = field(default_factory=list)
    lost_answers: list[LostAnswer] = field(default_factory=list)

    def refuse_next(self, refusal: FailNext) -> None:
        if refusal.remaining:
            self.refusals.append(refusal)

    def lose_next(self, count: int, fault: AfterAccept | str, status: int) -> None:
        """Accept the next ``count`` requests, then lose their answers as ``fault`` says."""
        fault = AfterAccept(fault)
        if count < 0 or not 500 <= status <= 599:
            raise ValueError("fail_after_accept needs count >= 0 and a 5xx status")
        if count:
            self.lost_answers.append(LostAnswer(fault, count, status))

    def next_refusal(self) -> FailNext | None:
        return _take_next(self.refusals)

    def next_lost_answer(self) -> LostAnswer | None:
        return _take_next(self.lost_answers)

    def clear(self) -> None:
        self.refusals.clear()
        self.lost_answers.clear()

    def describe(self) -> dict[str, list[dict[str, Any]]]:
        return {
            "fail_next": [asdict(f) for f in self.refusals],
            "after_accept": [asdict(f) for f in self.lost_answers],
        }


_Fault = TypeVar("_Fault", FailNext, LostAnswer)


def _take_next(pending: list[_Fault]) -> _Fault | None:
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
