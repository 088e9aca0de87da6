"""The Expo sandbox's test controls over HTTP, under ``/_sandbox/``: the shared ones
(:mod:`tepat.sandbox.controls`) with Expo's script format.

They call the same methods a test calls in-process on :class:`~tepat.sandbox.expo.ExpoSandbox`.
"""

from __future__ import annotations

from typing import Any, Protocol

from starlette.routing import Route

from tepat.sandbox.controls import SandboxControls, apply_shared_script
from tepat.sandbox.controls import control_routes as shared_routes
from tepat.sandbox.expo_wire import request_errors


class ExpoSandbox(SandboxControls, Protocol):
    """What these controls call on :class:`tepat.sandbox.expo.ExpoSandbox`."""

    def clear_scripts(self) -> None: ...
    def script_token(
        self, token: str, *, ticket_error: str | None = ..., receipt_error: str | None = ...
    ) -> None: ...
    def fail_next(
        self, count: int, status: int = ..., retry_after: float | None = ..., code: str | None = ...
    ) -> None: ...
    def set_receipt_delay(self, seconds: float) -> None: ...


def control_routes(sandbox: ExpoSandbox) -> list[Route]:
    """The shared ``/_sandbox/`` routes; the script is ``POST`` JSON, every key optional::

    {"tokens": {"ExponentPushToken[a]": {"ticket_error": "DeviceNotRegistered"},
                "ExponentPushToken[b]": {"receipt_error": "DeviceNotRegistered"},
                "ExponentPushToken[c]": null},          # null: remove the script
     "clear": true,                                       # drop all scripts first
     "next_429": 2, "next_500": 1, "retry_after": 3,
     "fail_next": {"count": 1, "status": 400, "code": "PUSH_TOO_MANY_EXPERIENCE_IDS"},
     "after_accept": {"count": 1, "fault": "stall" | "drop" | "error", "status": 502},
     "release_stalled": true,
     "rate_limit": 600, "receipt_delay_seconds": 900}
    """
    return shared_routes(
        sandbox,
        lambda spec: apply_script(sandbox, spec),
        lambda message: request_errors("VALIDATION_ERROR", message, 400),
    )


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
    apply_shared_script(sandbox, spec)
    if "receipt_delay_seconds" in spec:
        sandbox.set_receipt_delay(float(spec["receipt_delay_seconds"]))
