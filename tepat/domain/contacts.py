"""Contact points and suppressions (issue 13, items 4 and 5).

A user has at most one contact point per channel (an e-mail address, an E.164 phone
number), each with a verified flag. A suppression comes from a provider (a hard bounce,
a complaint, a STOP reply) or an operator, names an address rather than a user, and
makes a send to that address end ``skipped``/``suppressed`` whoever the user is.
Addresses are normalised, so a user's contact and a provider's report meet on one string.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import datetime

import email_validator
import phonenumbers

from tepat.domain.errors import DomainError, enum_member

#: The channels a contact point or a suppression can name.
CONTACT_CHANNELS: tuple[str, ...] = ("email", "sms")

# RFC 5321: 254 octets for the whole path an SMTP server accepts.
_MAX_EMAIL = 254


class SuppressionReason(enum.StrEnum):
    HARD_BOUNCE = "hard_bounce"
    COMPLAINT = "complaint"
    STOP = "stop"
    INVALID = "invalid"
    MANUAL = "manual"


# Which reason a second report may overwrite (see ``overrides``): a complaint says the
# most about the recipient (they do not want mail from us), a hard bounce that the
# mailbox is dead; either outranks a STOP, an invalid number or an operator's entry.
_RANK: dict[SuppressionReason, int] = {
    SuppressionReason.COMPLAINT: 2,
    SuppressionReason.HARD_BOUNCE: 1,
    SuppressionReason.STOP: 0,
    SuppressionReason.INVALID: 0,
    SuppressionReason.MANUAL: 0,
}


def overrides(new: SuppressionReason, old: SuppressionReason) -> bool:
    """Whether a suppression reported again with ``new`` replaces the stored ``old``
    reason: only a strictly stronger one (``added_at`` never moves)."""
    return _RANK[new] > _RANK[old]


@dataclass(frozen=True, slots=True)
class Contact:
    user_id: str
    channel: str  # one of CONTACT_CHANNELS
    address: str  # normalised: see normalise_address
    verified: bool
    updated_at: datetime


@dataclass(frozen=True, slots=True)
class Suppression:
    channel: str
    address: str  # normalised
    reason: SuppressionReason
    added_at: datetime
    source: str | None = None  # who reported it: "smtp", "ses", "twilio", "admin", ...


def check_channel(value: object, field: str) -> str:
    if not isinstance(value, str) or value not in CONTACT_CHANNELS:
        raise DomainError(field, f"must be one of {', '.join(CONTACT_CHANNELS)}")
    return value


def check_reason(value: object, field: str) -> SuppressionReason:
    names = ", ".join(SuppressionReason)
    return enum_member(SuppressionReason, str(value), field, f"must be one of {names}")


def normalise_email(value: object, field: str) -> str:
    """``local@domain`` with the domain lower-cased (the local part's case is the
    receiving server's business), checked by ``email-validator`` without DNS: no quoted
    local part (no real mailbox uses one; they invite header injection), no special-use
    domain; an internationalised domain is stored as ``xn--`` (what DNS and SMTP see)."""
    text = _address_text(value, field, _MAX_EMAIL)
    try:
        checked = email_validator.validate_email(
            text, check_deliverability=False, allow_smtputf8=False
        )
    except email_validator.EmailNotValidError as e:
        raise DomainError(field, f"is not a valid e-mail address: {e}") from None
    return f"{checked.local_part}@{checked.ascii_domain.lower()}"


def normalise_phone(value: object, field: str, default_region: str | None = None) -> str:
    """The number in E.164 (``+14155550100``): international, or national to
    ``default_region`` (ISO 3166 alpha-2) when given. A number ``phonenumbers`` deems
    invalid is refused: a provider would refuse it (Twilio 21211) after we paid."""
    text = _address_text(value, field, 64)
    try:
        number = phonenumbers.parse(text, default_region)
    except phonenumbers.NumberParseException:
        international = default_region is None and not text.startswith("+")
        hint = " (start with + and the country code)" if international else ""
        raise DomainError(field, f"is not a phone number{hint}") from None
    if not phonenumbers.is_valid_number(number):
        raise DomainError(field, "is not a valid phone number")
    return phonenumbers.format_number(number, phonenumbers.PhoneNumberFormat.E164)


def _address_text(value: object, field: str, max_chars: int) -> str:
    if not isinstance(value, str):
        raise DomainError(field, "must be a string")
    text = value.strip()
    if not text:
        raise DomainError(field, "must not be empty")
    if len(text) > max_chars:
        raise DomainError(field, f"must be at most {max_chars} characters")
    return text


def normalise_address(channel: str, value: object, field: str) -> str:
    """The address as stored for ``channel`` (see ``normalise_email``, ``normalise_phone``)."""
    if channel == "email":
        return normalise_email(value, field)
    if channel == "sms":
        return normalise_phone(value, field)
    raise DomainError("channel", f"must be one of {', '.join(CONTACT_CHANNELS)}")
