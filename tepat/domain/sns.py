"""Amazon SNS HTTP(S) messages: their shape, the string they are signed over, the URLs
they may name. Pure; the signature is checked in :mod:`tepat.adapters.sns_verify`.

As AWS documents it, the signed string is ``name\\nvalue\\n`` for each of a fixed list
of fields per message type (``_SIGNED_FIELDS``); and the certificate must come from an
https URL on SNS's own host, or anybody could sign with their own key. A valid signature
proves SNS sent the message, not that *our* topic did: only the topics in
``TEPAT_EMAIL_EVENTS_TOPIC_ARNS`` are believed (:func:`check_topic`).
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from tepat.domain.errors import DomainError

NOTIFICATION = "Notification"
SUBSCRIPTION_CONFIRMATION = "SubscriptionConfirmation"
UNSUBSCRIBE_CONFIRMATION = "UnsubscribeConfirmation"

_SIGNED_FIELDS = {
    NOTIFICATION: ("Message", "MessageId", "Subject", "Timestamp", "TopicArn", "Type"),
    SUBSCRIPTION_CONFIRMATION: (
        "Message",
        "MessageId",
        "SubscribeURL",
        "Timestamp",
        "Token",
        "TopicArn",
        "Type",
    ),
}
_SIGNED_FIELDS[UNSUBSCRIBE_CONFIRMATION] = _SIGNED_FIELDS[SUBSCRIPTION_CONFIRMATION]
_OPTIONAL = frozenset({"Subject"})
_SNS_HOST = re.compile(r"^sns\.[a-z]{2}(?:-[a-z]+)+-\d\.amazonaws\.com$")
_TOPIC_ARN = re.compile(r"^arn:aws[a-z-]*:sns:[a-z0-9-]+:\d{12}:[A-Za-z0-9_.-]{1,256}$")


class SnsRefused(DomainError):
    """Not a message we believe: malformed, wrongly signed, or from a topic not ours."""


@dataclass(frozen=True, slots=True)
class SnsMessage:
    type: str
    message_id: str
    topic_arn: str
    message: str
    signature_version: str
    signature: str
    signing_cert_url: str
    fields: Mapping[str, str]  # every string field, for the signed string

    @property
    def subscribe_url(self) -> str | None:
        return self.fields.get("SubscribeURL")


def parse_message(body: Any) -> SnsMessage:
    """The SNS envelope of a POST body (already JSON-decoded); :class:`SnsRefused` naming
    the field when a field the signature needs is missing or not text."""
    if not isinstance(body, dict):
        raise SnsRefused("body", "expected an SNS message (a JSON object)")
    kind = body.get("Type")
    if kind not in _SIGNED_FIELDS:
        raise SnsRefused("Type", f"not an SNS message type we take: {kind!r}")
    needed = (*_SIGNED_FIELDS[kind], "SignatureVersion", "Signature", "SigningCertURL")
    fields: dict[str, str] = {}
    for name in needed:
        value = body.get(name)
        if value is None and name in _OPTIONAL:
            continue
        if not isinstance(value, str):
            raise SnsRefused(name, "missing, or not a string")
        fields[name] = value
    if fields["SignatureVersion"] not in ("1", "2"):
        raise SnsRefused("SignatureVersion", "expected 1 (SHA1withRSA) or 2 (SHA256withRSA)")
    return SnsMessage(
        type=kind,
        message_id=fields["MessageId"],
        topic_arn=fields["TopicArn"],
        message=fields["Message"],
        signature_version=fields["SignatureVersion"],
        signature=fields["Signature"],
        signing_cert_url=fields["SigningCertURL"],
        fields=fields,
    )


def string_to_sign(message: SnsMessage) -> bytes:
    """The bytes SNS signed for ``message`` (see the module's docstring)."""
    fields = message.fields  # only Subject may be absent
    return "".join(
        f"{n}\n{fields[n]}\n" for n in _SIGNED_FIELDS[message.type] if n in fields
    ).encode()


def check_sns_url(url: str, field: str) -> str:
    """An https URL on ``sns.<region>.amazonaws.com``: where a signing certificate may
    come from, and the only SubscribeURL we GET."""
    parts = urlsplit(url)
    on_sns = parts.scheme == "https" and _SNS_HOST.fullmatch(parts.hostname or "")
    if not on_sns or parts.port not in (None, 443) or parts.username or parts.password:
        raise SnsRefused(field, "expected an https URL on sns.<region>.amazonaws.com")
    return url


def check_cert_url(url: str) -> str:
    check_sns_url(url, "SigningCertURL")
    if not urlsplit(url).path.endswith(".pem"):
        raise SnsRefused("SigningCertURL", "expected a .pem certificate")
    return url


def check_topic(message: SnsMessage, allowed: Collection[str]) -> None:
    if message.topic_arn not in allowed:
        raise SnsRefused("TopicArn", "not a topic this server takes events from")


def check_topic_arn(value: str) -> str:
    """One entry of ``TEPAT_EMAIL_EVENTS_TOPIC_ARNS``."""
    if not _TOPIC_ARN.fullmatch(value):
        raise ValueError(
            f"expected SNS topic ARNs such as arn:aws:sns:eu-west-1:123456789012:ses-events,"
            f" got {value!r}"
        )
    return value
