"""The Expo sandbox's test controls over HTTP, under ``/_sandbox/``.

They call the same methods a test calls in-process on :class:`~tepat.sandbox.expo.ExpoSandbox`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from tepat.sandbox.expo_faults import AfterAccept
from tepat.sandbox.expo_wire import request_errors

if TYPE_CHECKING:
    from tepat.sandbox.expo import ExpoSandbox


def control_routes(sandbox: ExpoSandbox) -> list[Route]:
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
        """``POST`` JSON, every key optional::

            {"tokens": {"ExponentPushToken[a]": {"ticket_error": "DeviceNotRegistered"},
                        "ExponentPushToken[b]": {"receipt_error": "DeviceNotRegistered"},
                        "ExponentPushToken[c]": null},          # null: remove the script
             "clear": true,                                       # drop all scripts first
             "next_429": 2, "next_500": 1, "retry_after": 3,
             "fail_next": {"count": 1, "status": 400, "code": "PUSH_TOO_MANY_EXPERIENCE_IDS"},
             "after_accept": {"count": 1, "fault": "stall" | "drop" | "error", "status": 502},
             "release_stalled": true,
             "rate_limit": 600, "receipt_delay_seconds": 900}

        ``GET`` shows the current scripts.
        """
        if request.method == "GET":
            return JSONResponse(sandbox.describe())
        try:
            spec = await request.json()
            apply_script(sandbox, spec)
        except (ValueError, TypeError) as e:
            return request_errors("VALIDATION_ERROR", str(e), 400)
        return JSONResponse(sandbox.describe())

    return [
        Route("/_sandbox/received", received, methods=["GET", "DELETE"]),
        Route("/_sandbox/stats", stats, methods=["GET"]),
        Route("/_sandbox/script", script, methods=["GET", "POST"]),
        Route("/_sandbox/reset", reset, methods=["POST"]),
    ]


def apply_script(sandbox: ExpoSandbox, spec: Any) -> None:
    """Apply a ``POST /_sandbox/script`` body; ValueError/TypeError when it is malformed."""
    if not isinstance(spec, dict):
        raise ValueError("the script must be a JSON object")
    if spec.get("clear"):
        sandbox.clear_scripts()
    tokens = spec.get("tokens") or {}
    if not isinstance(tokens, dict):
        raise ValueError('"tokens" must map tokens to {"ticket_error", "receipt_error"}')
    for token, outcome in tokens.items():
        outcome = outcome or {}
        if not isinstance(outcome, dict):
            raise ValueError(f"script for {token!r} must be an object or null")
        sandbox.script_token(
            token,
            ticket_error=outcome.get("ticket_error"),
            receipt_error=outcome.get("receipt_error"),
        )
    retry_after = spec.get("retry_after", 1.0)
    if retry_after is not None:
        retry_after = float(retry_after)
    if spec.get("next_429"):
        sandbox.fail_next(int(spec["next_429"]), 429, retry_after)
    if spec.get("next_500"):
        sandbox.fail_next(int(spec["next_500"]), 500, retry_after)
    if fail := spec.get("fail_next"):
        if not isinstance(fail, dict):
            raise ValueError('"fail_next" must be {"count", "status", "code", "retry_after"}')
        sandbox.fail_next(
            int(fail.get("count", 1)),
            int(fail.get("status", 500)),
            fail.get("retry_after"),
            fail.get("code"),
        )
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
    if "receipt_delay_seconds" in spec:
        sandbox.set_receipt_delay(float(spec["receipt_delay_seconds"]))
