"""The Twilio sandbox's test controls over HTTP, under ``/_sandbox/``: the shared ones
(:mod:`tepat.sandbox.controls`) with Twilio's script format, and its own two.

They call the same methods a test calls in-process on
:class:`~tepat.sandbox.twilio.TwilioSandbox`.
"""

from __future__ import annotations

from typing import Any, Protocol

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from tepat.sandbox.controls import SandboxControls, apply_shared_script
from tepat.sandbox.controls import control_routes as shared_routes
from tepat.sandbox.twilio_wire import NumberScript


class TwilioSandbox(SandboxControls, Protocol):
    """What these controls call on :class:`tepat.sandbox.twilio.TwilioSandbox`."""

    def clear_scripts(self) -> None: ...
    def script_number(self, number: str, script: NumberScript | None) -> None: ...
    def unsubscribe(self, number: str, unsubscribed: bool = ...) -> None: ...
    def fail_next(self, count: int, status: int = ...) -> None: ...
    def set_callbacks(self, *, delay_seconds: float | None = ..., order: Any = ...) -> None: ...
    def callbacks(self) -> list[dict[str, Any]]: ...
    def pending_callbacks(self) -> int: ...
    async def inbound(self, url: str, from_: str, body: str, to: str = ...) -> int: ...


def _bad(message: str) -> JSONResponse:
    return JSONResponse(
        {"code": 20001, "message": message, "more_info": "", "status": 400}, status_code=400
    )


def control_routes(sandbox: TwilioSandbox) -> list[Route]:
    """The shared ``/_sandbox/`` routes, the callbacks posted and an inbound message.

    The script is ``POST`` JSON, every key optional::

        {"numbers": {"+14155550100": {"api_error": 21211},
                     "+14155550101": {"status": "undelivered", "error_code": 30003},
                     "+14155550102": null},                 # null: delivered again
         "clear": true,                                      # drop all scripts first
         "unsubscribed": ["+14155550103"], "subscribed": ["+14155550103"],
         "next_429": 2, "next_500": 1,
         "after_accept": {"count": 1, "fault": "stall" | "drop" | "error", "status": 502},
         "release_stalled": true,
         "rate_limit": 10, "callback_delay_seconds": 2, "callback_order": "reversed"}
    """

    async def callbacks(request: Request) -> Response:
        return JSONResponse(
            {"callbacks": sandbox.callbacks(), "pending": sandbox.pending_callbacks()}
        )

    async def inbound(request: Request) -> Response:
        """``POST {"url": …, "from": "+1…", "body": "STOP", "to"?: …}``: Twilio posts an
        inbound message (signed) to ``url``; answers with the receiver's HTTP status."""
        try:
            spec = await request.json()
            if not isinstance(spec, dict):
                raise ValueError("expected a JSON object")
            url, from_, body = str(spec["url"]), str(spec["from"]), str(spec["body"])
            to = spec.get("to")
        except (ValueError, KeyError) as e:
            return _bad(f"expected {{url, from, body}}: {e}")
        args = (url, from_, body) if to is None else (url, from_, body, str(to))
        status = await sandbox.inbound(*args)
        return JSONResponse({"http_status": status})

    return [
        *shared_routes(sandbox, lambda spec: apply_script(sandbox, spec), _bad),
        Route("/_sandbox/callbacks", callbacks, methods=["GET"]),
        Route("/_sandbox/inbound", inbound, methods=["POST"]),
    ]


def apply_script(sandbox: TwilioSandbox, spec: Any) -> None:
    """Apply a ``POST /_sandbox/script`` body; ValueError/TypeError when it is malformed."""
    if not isinstance(spec, dict):
        raise ValueError("the script must be a JSON object")
    if spec.get("clear"):
        sandbox.clear_scripts()
    numbers = spec.get("numbers") or {}
    if not isinstance(numbers, dict):
        raise ValueError('"numbers" must map numbers to {"api_error", "status", "error_code"}')
    for number, outcome in numbers.items():
        if outcome is not None and not isinstance(outcome, dict):
            raise ValueError(f"script for {number!r} must be an object or null")
        sandbox.script_number(number, NumberScript(**outcome) if outcome is not None else None)
    for number in spec.get("unsubscribed") or []:
        sandbox.unsubscribe(str(number))
    for number in spec.get("subscribed") or []:
        sandbox.unsubscribe(str(number), False)
    if spec.get("next_429"):
        sandbox.fail_next(int(spec["next_429"]), 429)
    if spec.get("next_500"):
        sandbox.fail_next(int(spec["next_500"]), 500)
    apply_shared_script(sandbox, spec)
    sandbox.set_callbacks(
        delay_seconds=(
            float(spec["callback_delay_seconds"]) if "callback_delay_seconds" in spec else None
        ),
        order=spec.get("callback_order"),
    )
