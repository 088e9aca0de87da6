"""The Twilio sandbox's wire format: paths, error bodies and the Message resource.

Shapes as Twilio's REST API returns them (twilio.com/docs/messaging/api/message-resource,
twilio.com/docs/api/errors): an error is ``{"code", "message", "more_info", "status"}``
with the HTTP status repeated in the body; a created message is a Message resource with
``sid`` ``SM`` + 32 hex digits, ``status`` ``queued`` (``accepted`` through a Messaging
Service), ``num_segments`` as a string, dates in RFC 2822.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from email.utils import format_datetime
from typing import Any

from starlette.responses import JSONResponse

API_VERSION = "2010-04-01"
MESSAGES_PATH = "/2010-04-01/Accounts/{AccountSid}/Messages.json"
ACCOUNT_PATH = "/2010-04-01/Accounts/{AccountSid}.json"
MAX_BODY_CHARS = 1600

# The error codes the sandbox answers with, and Twilio's wording.
ERRORS: dict[int, tuple[int, str]] = {
    20003: (401, "Authenticate"),
    20429: (429, "Too Many Requests"),
    20500: (500, "An internal server error has occurred"),
    21211: (400, "The 'To' number {to} is not a valid phone number."),
    21212: (400, "The 'From' number {from_} is not a valid phone number or shortcode."),
    21408: (
        400,
        "Permission to send an SMS has not been enabled for the region indicated by"
        " the 'To' number: {to}.",
    ),
    21602: (400, "Message body is required."),
    21603: (400, "A 'From' phone number is required."),
    21604: (400, "A 'To' phone number is required."),
    21610: (400, "Attempt to send to unsubscribed recipient"),
    21614: (400, "'To' number {to} is not a valid mobile number"),
    21617: (400, "The concatenated message body exceeds the 1600 character limit."),
}
# Scriptable per number: refused at the API, before anything is queued.
SCRIPTABLE_API_ERRORS = frozenset({21211, 21408, 21610, 21614})
# Delivery errors a status callback carries (twilio.com/docs/api/errors/30003 ...).
DELIVERY_ERRORS = frozenset({30003, 30004, 30005, 30006, 30007, 30008})
FINAL_STATUSES = frozenset({"delivered", "undelivered", "failed"})


@dataclass(frozen=True, slots=True)
class NumberScript:
    """What happens to messages to one number: refused at the API (``api_error``), or
    accepted and ending ``status`` (``delivered``, ``undelivered`` or ``failed``, the
    latter two with a 300xx ``error_code``)."""

    api_error: int | None = None
    status: str = "delivered"
    error_code: int | None = None

    def __post_init__(self) -> None:
        if self.api_error is not None and self.api_error not in SCRIPTABLE_API_ERRORS:
            raise ValueError(
                f"unknown api_error {self.api_error!r} (one of {sorted(SCRIPTABLE_API_ERRORS)})"
            )
        if self.status not in FINAL_STATUSES:
            raise ValueError(f"status must be one of {sorted(FINAL_STATUSES)}")
        if self.status == "delivered" and self.error_code is not None:
            raise ValueError("a delivered message carries no error_code")
        if self.status != "delivered" and self.error_code not in DELIVERY_ERRORS:
            raise ValueError(f"error_code must be one of {sorted(DELIVERY_ERRORS)}")


def error_response(
    code: int, headers: dict[str, str] | None = None, to: str = "", from_: str = ""
) -> JSONResponse:
    status, template = ERRORS[code]
    body = {
        "code": code,
        "message": template.format(to=to, from_=from_),
        "more_info": f"https://www.twilio.com/docs/errors/{code}",
        "status": status,
    }
    return JSONResponse(body, status_code=status, headers=headers)


def message_resource(
    account_sid: str, message: Mapping[str, Any], created: datetime
) -> dict[str, Any]:
    """The Message resource of a message the sandbox took (its entry in ``received``)."""
    sid, service = message["sid"], message["messaging_service_sid"]
    uri = f"/{API_VERSION}/Accounts/{account_sid}/Messages/{sid}"
    return {
        "account_sid": account_sid,
        "api_version": API_VERSION,
        "body": message["body"],
        "date_created": format_datetime(created),
        "date_sent": None,
        "date_updated": format_datetime(created),
        "direction": "outbound-api",
        "error_code": None,
        "error_message": None,
        "from": message["from"],
        "messaging_service_sid": service,
        "num_media": "0",
        "num_segments": str(message["num_segments"]),
        "price": None,
        "price_unit": "USD",
        "sid": sid,
        "status": "accepted" if service else "queued",
        "subresource_uris": {"media": f"{uri}/Media.json"},
        "to": message["to"],
        "uri": f"{uri}.json",
    }


def account_resource(account_sid: str, created: datetime) -> dict[str, Any]:
    """The Account resource (twilio.com/docs/iam/api/account), as much as anyone reads."""
    uri = f"/{API_VERSION}/Accounts/{account_sid}.json"
    return {
        "auth_token": None,  # never shown here (Twilio shows it only to the account)
        "date_created": format_datetime(created),
        "date_updated": format_datetime(created),
        "friendly_name": "Tepat sandbox",
        "owner_account_sid": account_sid,
        "sid": account_sid,
        "status": "active",
        "subresource_uris": {"messages": f"/{API_VERSION}/Accounts/{account_sid}/Messages.json"},
        "type": "Full",
        "uri": uri,
    }
