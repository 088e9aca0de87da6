"""What every sandbox (a fake provider) keeps the same way: its state under one lock, the
scripted faults, the answers it holds back, its rate limit, its counters, and the test
controls it serves under ``/_sandbox/`` (the same methods a test calls in-process)."""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from typing import Any, ClassVar, Generic, TypeVar

from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from tepat.adapters.rate_limit import TokenBucket
from tepat.clock import Clock, SystemClock
from tepat.sandbox.faults import AfterAccept, DroppedResponse, FailNext, FaultQueue, Stalls


def private_pem(key: rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey) -> str:
    """A key as a provider's credentials carry it: PEM, PKCS #8, unencrypted."""
    return key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption()).decode()


@dataclass(slots=True)
class Stats:
    """The counters every sandbox keeps (``GET /_sandbox/stats``); each adds its own."""

    requests: int = 0
    unauthorized: int = 0
    too_many_requests: int = 0
    server_errors: int = 0
    # Send requests accepted whose answer was lost (:meth:`FakeProvider.fail_after_accept`).
    answers_lost: int = 0


@dataclass(slots=True)
class SandboxState:
    """What every sandbox keeps under its lock; each adds its own (and its own counters)."""

    received: list[dict[str, Any]] = field(default_factory=list)  # accepted, oldest first
    # per recipient: what happens to what is sent to it
    scripts: dict[str, Any] = field(default_factory=dict)
    faults: FaultQueue = field(default_factory=FaultQueue)
    stats: Stats = field(default_factory=Stats)


State = TypeVar("State", bound=SandboxState)


class FakeProvider(ABC, Generic[State]):
    """The state of one fake provider account, and the ASGI app that serves it
    (:attr:`app`); safe to drive from a test thread while a server thread serves requests.

    A sandbox brings its provider's routes, its per-recipient script (:attr:`_script_type`,
    kept under :attr:`_scripts_key`), its other script keys, its words for a refusal and
    the part of :meth:`describe` that is its own: the abstract methods below.
    """

    _scripts_key: str  # "tokens", "numbers": what the recipients are called
    _script_type: type  # a frozen dataclass: what happens to what is sent to one recipient
    http2: ClassVar[bool] = False  # served over h2c (APNs), else HTTP/1.1

    def __init__(
        self,
        new_state: Callable[[], State],
        scripts: Mapping[str, Any] | None,
        clock: Clock | None,
        rate_limit: float | None,
        stall_limit_seconds: float,
        routes: Sequence[Route],
        **app_options: Any,
    ) -> None:
        self.clock: Clock = clock or SystemClock()
        # A stalled answer ends when the client hangs up, on release_stalled(), or after
        # stall_limit_seconds of wall-clock time.
        self._stalls = Stalls(stall_limit_seconds)
        self._lock = threading.Lock()
        self._new_state = new_state
        self._state = new_state()
        self._state.scripts.update(scripts or {})
        self._bucket: TokenBucket | None = None
        self.set_rate_limit(rate_limit)
        self.app = Starlette(routes=[*routes, *self._control_routes()], **app_options)

    # ---- what each sandbox words its own way ----

    @abstractmethod
    def _describe_own(self) -> dict[str, Any]: ...
    @abstractmethod
    def _apply_own_script(self, spec: dict[str, Any]) -> None: ...
    @abstractmethod  # a request fail_next refuses (under the lock)
    def _refusal(self, failure: FailNext) -> Response: ...
    @abstractmethod  # an answer lost as a 5xx (AfterAccept.ERROR)
    def _server_error(self, status: int) -> Response: ...
    @abstractmethod
    def _unauthorized(self) -> Response: ...
    @abstractmethod  # whether the request's credentials hold (under the lock)
    def _authorized(self, request: Any) -> bool: ...
    @abstractmethod
    def _bad_script(self, message: str) -> Response: ...

    # ---- controls (also reachable over HTTP at /_sandbox/...) ----

    def describe(self) -> dict[str, Any]:
        with self._lock:
            scripts = {r: asdict(s) for r, s in self._state.scripts.items()}
            return {
                self._scripts_key: scripts,
                **self._describe_own(),
                **self._state.faults.describe(),
                "rate_limit": self.rate_limit,
            }

    def clear_scripts(self) -> None:
        with self._lock:
            self._state.scripts.clear()
            self._state.faults.clear()

    def _script_from(self, outcome: dict[str, Any]) -> Any | None:
        """One recipient's entry in a script: its fields as ``outcome`` names them, the
        others unset (None: the usual, no script)."""
        kind = self._script_type
        script = kind(**{f.name: outcome.get(f.name) for f in fields(kind)})
        return None if script == kind() else script

    def _set_script(self, recipient: str, script: Any | None) -> None:
        """What happens to what is sent to ``recipient`` from now on (``None``: the usual)."""
        with self._lock:
            if script is None:
                self._state.scripts.pop(recipient, None)
            else:
                self._state.scripts[recipient] = script

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

    def _refuse_next(
        self, count: int, status: int, retry_after: float | None = None, code: str | None = None
    ) -> None:
        """Refuse the next ``count`` requests with HTTP ``status`` (see :class:`FailNext`)."""
        with self._lock:
            self._state.faults.refuse_next(FailNext(status, count, retry_after, code))

    def release_stalled(self) -> None:
        """Answer every stalled request now (late, as it would have been)."""
        self._stalls.release_all()

    def stalled(self) -> int:
        return len(self._stalls)

    def set_rate_limit(self, rate: float | None) -> None:
        """The rate beyond which requests get 429 (``None``: unlimited)."""
        self._bucket = TokenBucket(rate, self.clock) if rate else None
        self.rate_limit = rate

    def received(self) -> list[dict[str, Any]]:
        """What was accepted, oldest first, each stamped (``at``; Expo's ``received_at``,
        Twilio's ``date_created``: ISO 8601 on the sandbox's clock) with the instant the
        sandbox took its request: for FCM and APNs over HTTP/2, when the request's bytes
        were read off the socket; otherwise when the app came to handle it."""
        with self._lock:
            return [self._logged(r) for r in self._state.received]

    def _logged(self, entry: dict[str, Any]) -> dict[str, Any]:
        """One entry of the log as :meth:`received` gives it: a copy."""
        return dict(entry)

    def clear_received(self) -> None:
        with self._lock:
            self._state.received.clear()

    def stats(self) -> dict[str, int]:
        with self._lock:
            counters: dict[str, int] = asdict(self._state.stats)
            return counters

    def reset(self) -> None:
        """Forget everything: what was received, scripts, faults, counters."""
        with self._lock:
            self._state = self._new_state()
        self.set_rate_limit(self.rate_limit)

    def apply_script(self, spec: Any) -> None:
        """Apply a ``POST /_sandbox/script`` body; ValueError/TypeError when it is malformed.

        Every sandbox takes these keys alike (and its own, see its ``_apply_own_script``)::

            {"clear": true,                                   # drop all scripts first
             "tokens" | "numbers": {"<recipient>": {...}, "<another>": null},  # null: usual
             "after_accept": {"count": 1, "fault": "stall" | "drop" | "error", "status": 502},
             "release_stalled": true, "rate_limit": 10}
        """
        if not isinstance(spec, dict):
            raise ValueError("the script must be a JSON object")
        if spec.get("clear"):
            self.clear_scripts()
        key = self._scripts_key
        scripts = spec.get(key) or {}
        if not isinstance(scripts, dict):
            names = ", ".join(f'"{f.name}"' for f in fields(self._script_type))
            raise ValueError(f'"{key}" must map {key} to {{{names}}}')
        for recipient, outcome in scripts.items():
            if outcome is not None and not isinstance(outcome, dict):
                raise ValueError(f"script for {recipient!r} must be an object or null")
            self._set_script(recipient, None if outcome is None else self._script_from(outcome))
        self._apply_own_script(spec)
        if after := spec.get("after_accept"):
            if not isinstance(after, dict):
                raise ValueError('"after_accept" must be {"count", "fault", "status"}')
            self.fail_after_accept(
                int(after.get("count", 1)),
                str(after.get("fault", AfterAccept.STALL)),
                int(after.get("status", 500)),
            )
        if spec.get("release_stalled"):
            self.release_stalled()
        if "rate_limit" in spec:
            rate = spec["rate_limit"]
            self.set_rate_limit(float(rate) if rate else None)

    # ---- serving ----

    def _gate(self, request: Any, refusals: bool = True) -> Response | None:
        """Scripted refusals (unless not ``refusals``), then authentication (only for a
        request no scripted refusal took), before anything is read. Counts the request."""
        with self._lock:
            self._state.stats.requests += 1
            failure = self._state.faults.next_refusal() if refusals else None
            if failure is not None:
                if failure.status == 429:
                    self._state.stats.too_many_requests += 1
                elif failure.status >= 500:
                    self._state.stats.server_errors += 1
                return self._refusal(failure)
            if not self._authorized(request):
                self._state.stats.unauthorized += 1
                return self._unauthorized()
        return None

    def _over_rate(self, count: int, bucket: TokenBucket | None = None) -> float:
        """Seconds until ``count`` more fit the rate limit (``bucket``'s, else the
        sandbox's), counted as a 429; 0 when they fit now (and are taken)."""
        bucket = bucket or self._bucket
        wait = bucket.try_acquire(count) if bucket is not None and count else 0.0
        if wait > 0:
            with self._lock:
                self._state.stats.too_many_requests += 1
        return wait

    async def lose_or_answer(
        self,
        answer: Response,
        request: Request,
        accepted: Sequence[dict[str, Any]] = (),
    ) -> Response:
        """``answer`` to an accepted send, unless a scripted fault loses it
        (:meth:`fail_after_accept`). A lost answer marks the request's entries in
        :meth:`received` (``accepted``) ``answer_lost`` (``stall``, ``drop`` or ``error``),
        so whoever counts copies can tell a copy the sender never heard of."""
        with self._lock:
            fault = self._state.faults.next_lost_answer()
            if fault is not None:
                self._state.stats.answers_lost += 1
                for entry in accepted:
                    entry["answer_lost"] = fault.fault.value
        if fault is None:
            return answer
        if fault.fault is AfterAccept.ERROR:
            return self._server_error(fault.status)
        if fault.fault is AfterAccept.DROP:
            return DroppedResponse()
        await self._stalls.hold(request)  # then the answer, late, if released in time
        return answer

    def _control_routes(self) -> list[Route]:
        async def received(request: Request) -> Response:
            if request.method == "DELETE":
                self.clear_received()
                return Response(status_code=204)
            return JSONResponse({"received": self.received()})

        async def stats(request: Request) -> Response:
            return JSONResponse(self.stats())

        async def reset(request: Request) -> Response:
            self.reset()
            return Response(status_code=204)

        async def script(request: Request) -> Response:
            if request.method == "POST":
                try:
                    self.apply_script(await request.json())
                except (ValueError, TypeError) as e:
                    return self._bad_script(str(e))
            return JSONResponse(self.describe())

        return [
            Route("/_sandbox/received", received, methods=["GET", "DELETE"]),
            Route("/_sandbox/stats", stats, methods=["GET"]),
            Route("/_sandbox/script", script, methods=["GET", "POST"]),
            Route("/_sandbox/reset", reset, methods=["POST"]),
        ]
