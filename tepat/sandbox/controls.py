"""The test controls every sandbox serves under ``/_sandbox/``.

They call the same methods a test calls in-process on the sandbox
(:class:`~tepat.sandbox.provider.FakeProvider`); each sandbox brings its own script
format (``apply_script``) and its own words for a malformed one (``bad_request``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from tepat.sandbox.faults import AfterAccept


class SandboxControls(Protocol):
    """What the shared controls call on a sandbox (:class:`~tepat.sandbox.provider.FakeProvider`
    has them all). A Protocol, so that a sandbox module imports its controls and never the
    other way round."""

    def describe(self) -> dict[str, Any]: ...
    def received(self) -> list[dict[str, Any]]: ...
    def clear_received(self) -> None: ...
    def stats(self) -> dict[str, int]: ...
    def reset(self) -> None: ...
    def fail_after_accept(self, count: int, fault: AfterAccept | str, status: int) -> None: ...
    def release_stalled(self) -> None: ...
    def set_rate_limit(self, rate: float | None) -> None: ...


def control_routes(
    sandbox: SandboxControls,
    apply_script: Callable[[Any], None],
    bad_request: Callable[[str], Response],
) -> list[Route]:
    async def received(request: Request) -> Response:
        if request.method == "DELETE":
            sandbox.clear_received()
            return Response(status_code=204)
        return JSONResponse({"received": sandbox.received()})

    async def stats(request: Request) -> Response:
        return JSONResponse(sandbox.stats())

    async def reset(request: Request) -> Response:
        sandbox.reset()
        return Response(status_code=204)

    async def script(request: Request) -> Response:
        """``POST`` a JSON script (see the sandbox's ``apply_script``); ``GET`` shows the
        scripts in force."""
        if request.method == "GET":
            return JSONResponse(sandbox.describe())
        try:
            apply_script(await request.json())
        except (ValueError, TypeError) as e:
            return bad_request(str(e))
        return JSONResponse(sandbox.describe())

    return [
        Route("/_sandbox/received", received, methods=["GET", "DELETE"]),
        Route("/_sandbox/stats", stats, methods=["GET"]),
        Route("/_sandbox/script", script, methods=["GET", "POST"]),
        Route("/_sandbox/reset", reset, methods=["POST"]),
    ]


def apply_shared_script(sandbox: SandboxControls, spec: dict[str, Any]) -> None:
    """The keys of a ``POST /_sandbox/script`` body every sandbox takes alike::

    {"after_accept": {"count": 1, "fault": "stall" | "drop" | "error", "status": 502},
     "release_stalled": true, "rate_limit": 10}
    """
    if after := spec.get("after_accept"):
        if not isinstance(after, dict):
            raise ValueError('"after_accept" must be {"count", "fault", "status"}')
        sandbox.fail_after_accept(
            int(after.get("count", 1)),
            str(after.get("fault", AfterAccept.STALL)),
            int(after.get("status", 500)),
        )
    if spec.get("release_stalled"):
        sandbox.release_stalled()
    if "rate_limit" in spec:
        rate = spec["rate_limit"]
        sandbox.set_rate_limit(float(rate) if rate else None)
