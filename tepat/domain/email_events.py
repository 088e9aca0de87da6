"""E-mail status events from a provider, in Amazon SES's notification shape. Pure.

SES sends (through SNS, or a self-hosted relay posts the same JSON) one object per event::

    {"notificationType": "Bounce" | "Complaint" | "Delivery" | ...,   # or "eventType"
     "bounce": {"bounceType": "Permanent" | "Transient" | "Undetermined",
                "bouncedRecipients": [{"emailAddress": ..., "diagnosticCode": ...}]},
     "complaint": {"complainedRecipients": [{"emailAddress": ...}]},
     "delivery": {"recipients": [...]},
     "mail": {"messageId": <SES's id>, "headers": [{"name": ..., "value": ...}],
              "commonHeaders": {"messageId": "<...>"}}}

The Tepat message it is about: the ``X-Tepat-Message-Id`` header among ``mail.headers``
(SES replaces the ``Message-ID`` of mail it sends), else the ``<id@domain>``
``Message-ID`` Tepat set. :func:`parse_ses_event` never raises on content: an unknown
type or a bad field gives kind ``other`` or fewer recipients.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Literal

HEADER_MESSAGE_ID = "X-Tepat-Message-Id"
_ID = re.compile(r"^[A-Za-z0-9._-]{1,128}$")
_MESSAGE_ID_HEADER = re.compile(r"\s*<([A-Za-z0-9._-]{1,128})@[^<>@\s]+>\s*")
MAX_RECIPIENTS = 100

Kind = Literal["bounce", "complaint", "delivery", "other"]


@dataclass(frozen=True, slots=True)
class EmailEvent:
    kind: Kind
    type_name: str  # as the provider named it
    message_id: str | None  # Tepat's, when the mail names it
    provider_message_id: str | None  # the provider's own (SES: mail.messageId)
    recipients: tuple[str, ...] = ()  # bounced, complained or delivered addresses
    permanent: bool = False  # a bounce that will never clear
    detail: str | None = None  # bounce type/subtype and diagnostic, for last_error

    def dedup_id(self) -> str | None:
        """An id for the event when the transport gives none (the relay variant
        without ``eventId``): the provider's message id and the event type."""
        if not self.provider_message_id:
            return None
        return f"{self.provider_message_id}:{self.type_name}"


def message_id_from_header(value: str) -> str | None:
    """The Tepat message id in a ``Message-ID`` Tepat set (``<id@domain>``), else None."""
    m = _MESSAGE_ID_HEADER.fullmatch(value)
    return m.group(1) if m else None


def parse_ses_event(obj: Any) -> EmailEvent:
    doc = obj if isinstance(obj, dict) else {}
    type_name = _text(doc.get("notificationType")) or _text(doc.get("eventType")) or ""
    mail = _dict(doc.get("mail"))
    message_id = _our_message_id(mail)
    provider_id = _text(mail.get("messageId"))
    if type_name == "Bounce":
        bounce = _dict(doc.get("bounce"))
        recipients = _addresses(bounce.get("bouncedRecipients"))
        bounce_type = _text(bounce.get("bounceType")) or ""
        parts = [bounce_type, _text(bounce.get("bounceSubType")) or ""]
        diagnostics = [
            _text(_dict(r).get("diagnosticCode")) for r in _list(bounce.get("bouncedRecipients"))
        ]
        detail = "/".join(p for p in parts if p) + "".join(f": {d}" for d in diagnostics if d)
        return EmailEvent(
            "bounce",
            type_name,
            message_id,
            provider_id,
            recipients,
            permanent=bounce_type == "Permanent",
            detail=detail[:500] or None,
        )
    if type_name == "Complaint":
        complaint = _dict(doc.get("complaint"))
        recipients = _addresses(complaint.get("complainedRecipients"))
        return EmailEvent("complaint", type_name, message_id, provider_id, recipients)
    if type_name == "Delivery":
        delivery = _dict(doc.get("delivery"))
        found = (_text(x) for x in _list(delivery.get("recipients")))
        recipients = tuple(r for r in found if r)[:MAX_RECIPIENTS]
        return EmailEvent("delivery", type_name, message_id, provider_id, recipients)
    return EmailEvent("other", type_name[:64], message_id, provider_id)


def _our_message_id(mail: dict[str, Any]) -> str | None:
    for header in _list(mail.get("headers")):
        if not isinstance(header, dict):
            continue
        name, value = _text(header.get("name")), _text(header.get("value"))
        if name and value and name.lower() == HEADER_MESSAGE_ID.lower():
            value = value.strip()
            if _ID.fullmatch(value):
                return value
    common = _dict(mail.get("commonHeaders"))
    header_value = _text(common.get("messageId"))
    return message_id_from_header(header_value) if header_value else None


def _addresses(value: Any) -> tuple[str, ...]:
    found = (_text(_dict(r).get("emailAddress")) for r in _list(value)[:MAX_RECIPIENTS])
    return tuple(a for a in found if a)


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []
