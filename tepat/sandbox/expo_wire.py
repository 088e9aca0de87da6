"""The push API's wire format as the Expo sandbox speaks it: limits, error shapes, parsing."""

from __future__ import annotations

import gzip
import json
import math
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse

from tepat.adapters.expo_push import MAX_PAYLOAD_BYTES, payload_size
from tepat.domain.validation import is_expo_push_token

# Error codes Expo puts in ``details.error`` of tickets and receipts, worded as Expo does.
_TICKET_ERRORS = {
    "DeviceNotRegistered": '"{token}" is not a registered push notification recipient',
    "MessageTooBig": "Message too big: the total notification payload exceeds 4096 bytes",
    "MessageRateExceeded": 'Too many messages are being sent to "{token}"; slow down',
    "MismatchSenderId": "The FCM sender id does not match the one the token was issued for",
    "InvalidCredentials": "The push notification credentials for this project are invalid",
    "ProviderError": "The push notification provider returned an error",
    "ExpoError": "The Expo push notification service could not process this message",
    "DeveloperError": "The message is invalid",
}
TICKET_ERROR_CODES = frozenset(_TICKET_ERRORS)


def error_item(code: str, token: str, message: str | None = None) -> dict[str, Any]:
    details: dict[str, Any] = {"error": code}
    if code == "DeviceNotRegistered":
        details["expoPushToken"] = token
    message = message or _TICKET_ERRORS[code].format(token=token)
    return {"status": "error", "message": message, "details": details}


def request_errors(
    code: str, message: str, status: int, retry_after: float | None = None
) -> JSONResponse:
    headers = {} if retry_after is None else {"Retry-After": str(math.ceil(retry_after))}
    return JSONResponse({"errors": [{"code": code, "message": message}]}, status, headers=headers)


@dataclass(frozen=True, slots=True)
class TokenScript:
    """What the sandbox does with one token: fail its ticket, or accept it and fail its receipt."""

    ticket_error: str | None = None
    receipt_error: str | None = None

    def __post_init__(self) -> None:
        for code in (self.ticket_error, self.receipt_error):
            if code is not None and code not in TICKET_ERROR_CODES:
                raise ValueError(
                    f"unknown Expo error {code!r} (one of {sorted(TICKET_ERROR_CODES)})"
                )


def refused_ticket(token: str, payload_bytes: int, script: TokenScript) -> dict[str, Any] | None:
    """The error ticket Expo gives this recipient, or None when it takes the notification."""
    if not is_expo_push_token(token):
        return error_item("DeviceNotRegistered", token)
    if payload_bytes > MAX_PAYLOAD_BYTES:
        return error_item(
            "MessageTooBig",
            token,
            f"Message too big: the notification payload is {payload_bytes} bytes, "
            f"over the limit of {MAX_PAYLOAD_BYTES} bytes",
        )
    if script.ticket_error is not None:
        return error_item(script.ticket_error, token)
    return None


class BadRequest(Exception):
    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


async def read_json(request: Request) -> Any:
    """The JSON body, gzip- or deflate-decoded; :class:`BadRequest` when it is not."""
    raw = await request.body()
    encoding = request.headers.get("content-encoding", "identity").lower()
    try:
        if encoding == "gzip":
            raw = gzip.decompress(raw)
        elif encoding == "deflate":
            raw = zlib.decompress(raw)
        elif encoding not in ("", "identity"):
            raise BadRequest("VALIDATION_ERROR", f"unsupported Content-Encoding {encoding!r}")
    except (OSError, EOFError, zlib.error) as e:
        raise BadRequest("VALIDATION_ERROR", f"could not decode {encoding} body: {e}") from e
    try:
        return json.loads(raw)
    except ValueError as e:
        raise BadRequest("VALIDATION_ERROR", f"the request body must be JSON: {e}") from e


def parse_messages(body: Any) -> list[tuple[dict[str, Any], list[str]]]:
    """Messages with their recipients, in request order; 400 VALIDATION_ERROR when malformed."""
    items = body if isinstance(body, list) else [body]
    parsed: list[tuple[dict[str, Any], list[str]]] = []
    for index, message in enumerate(items):
        where = f'"[{index}]"' if isinstance(body, list) else '"value"'
        if not isinstance(message, dict):
            raise BadRequest("VALIDATION_ERROR", f"{where} must be of type object")
        to = message.get("to")
        if isinstance(to, str):
            recipients = [to]
        elif isinstance(to, list) and to and all(isinstance(t, str) for t in to):
            recipients = list(to)
        else:
            raise BadRequest(
                "VALIDATION_ERROR", f"{where}.to must be a push token or a non-empty array of them"
            )
        parsed.append((message, recipients))
    return parsed


def received_entry(
    message: Mapping[str, Any],
    token: str,
    ticket: Mapping[str, Any],
    now: datetime,
    encoding: str | None,
) -> dict[str, Any]:
    details = ticket.get("details") or {}
    copied = ("title", "subtitle", "body", "data", "sound", "priority", "ttl")
    return {
        "to": token,
        **{key: message.get(key) for key in copied},
        "channel_id": message.get("channelId"),
        "category_id": message.get("categoryId"),
        "ticket_id": ticket.get("id"),
        "status": ticket["status"],
        "error": details.get("error"),
        "payload_bytes": payload_size(message),
        "content_encoding": encoding,
        "received_at": now.isoformat(),
    }
