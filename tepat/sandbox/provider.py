"""What every sandbox (a fake provider) keeps the same way: its state under one lock, the
scripted faults, the answers it holds back, its rate limit, and the controls a test uses
on them in-process or over HTTP (:mod:`tepat.sandbox.controls`)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import asdict
from typing import Any, Generic, Protocol, TypeVar

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response

from tepat.adapters.rate_limit import TokenBucket
from tepat.clock import Clock, SystemClock
from tepat.sandbox.faults import AfterAccept, FaultQueue, Stalls


class SandboxState(Protocol):
    received: list[dict[str, Any]]  # what the provider accepted, oldest first
    scripts: dict[str, Any]  # per recipient: what happens to what is sent to it
    faults: FaultQueue[Any]
    stats: Any  # a dataclass of counters


State = TypeVar("State", bound=SandboxState)


class FakeProvider(Generic[State]):
    """The state of one fake provider account, and the ASGI app that serves it
    (:attr:`app`); safe to drive from a test thread while a server thread serves requests."""

    app: Starlette

    def __init__(
        self,
        new_state: Callable[[], State],
        state: State,
        clock: Clock | None,
        rate_limit: float | None,
        stall_limit_seconds: float,
    ) -> None:
        self.clock: Clock = clock or SystemClock()
        # A stalled answer ends when the client hangs up, on release_stalled(), or after
        # stall_limit_seconds of wall-clock time.
        self._stalls = Stalls(stall_limit_seconds)
        self._lock = threading.Lock()
        self._new_state = new_state
        self._state = state
        self._bucket: TokenBucket | None = None
        self.set_rate_limit(rate_limit)

    # ---- controls (also reachable over HTTP at /_sandbox/...) ----

    def describe(self) -> dict[str, Any]:
        """The scripted behaviour in force (what ``GET /_sandbox/script`` shows)."""
        raise NotImplementedError

    def clear_scripts(self) -> None:
        with self._lock:
            self._state.scripts.clear()
            self._state.faults.clear()

    def fail_after_accept(
        self, count: int, fault: AfterAccept | str = AfterAccept.STALL, status: int = 500
    ) -> None:
        """Accept the next ``count`` send requests, then lose their answers.

        What was sent is received and handled exactly as for a normal request; only the
        response goes wrong, as ``fault`` says: ``stall`` (no answer until the client's
        read timeout closes the connection), ``drop`` (the connection closes
        mid-response) or ``error`` (HTTP ``status``, a 5xx). The client cannot tell any of
        these from a request the provider never took, which is the point.
        """
        with self._lock:
            self._state.faults.lose_next(count, fault, status)

    def release_stalled(self) -> None:
        """Answer every stalled request now (late, as it would have been)."""
        self._stalls.release_all()

    def stalled(self) -> int:
        """How many answers are being held back right now."""
        return len(self._stalls)

    def set_rate_limit(self, rate: float | None) -> None:
        """The rate beyond which requests get 429 (``None``: unlimited)."""
        self._bucket = TokenBucket(rate, self.clock) if rate else None
        self.rate_limit = rate

    def received(self) -> list[dict[str, Any]]:
        """Everything accepted, oldest first."""
        with self._lock:
            return [dict(r) for r in self._state.received]

    def clear_received(self) -> None:
        with self._lock:
            self._state.received.clear()

    def stats(self) -> dict[str, int]:
        with self._lock:
            counters: dict[str, int] = asdict(self._state.stats)
            return counters

    async def lose_or_answer(
        self,
        answer: Response,
        request: Request,
        server_error: Callable[[int], Response],
        accepted: Sequence[dict[str, Any]] = (),
    ) -> Response:
        """``answer`` to an accepted send, unless a scripted fault loses it
        (:meth:`fail_after_accept`); ``server_error`` words the provider's 5xx.
        ``accepted``: the request's entries in :meth:`received`; a lost answer marks
        them ``answer_lost`` (``stall``, ``drop`` or ``error``), so whoever counts
        copies can tell a copy the sender never heard of."""
        with self._lock:
            fault = self._state.faults.next_lost_answer()
            if fault is not None:
                self._state.stats.answers_lost += 1
                for entry in accepted:
                    entry["answer_lost"] = fault.fault.value
        if fault is None:
            return answer
        return await fault.lose(answer, request, self._stalls, server_error)

    def reset(self) -> None:
        """Forget everything: what was received, scripts, faults, counters."""
        with self._lock:
            self._state = self._new_state()
        self.set_rate_limit(self.rate_limit)
