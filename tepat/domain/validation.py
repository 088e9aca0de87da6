"""Parsing of user-supplied values, with errors that name the field."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Collection, Iterable
from datetime import time

from tepat.domain.b64url import unb64url
from tepat.domain.errors import DomainError
from tepat.domain.models import PUSH_KINDS, WEEKDAYS, QuietHours

_HHMM = re.compile(r"^([01][0-9]|2[0-3]):([0-5][0-9])$")
_EXPO_TOKEN = re.compile(r"^(ExponentPushToken|ExpoPushToken)\[[^\[\]\s]{1,200}\]$")
# FCM documents no format: its registration tokens are URL-safe characters with a ':'
# after the instance id, ~160 long today; 4,096 leaves room as FCM asks.
_FCM_TOKEN = re.compile(r"^[A-Za-z0-9:_\-.]{1,4096}$")
# APNs device tokens are 32 bytes in hex today; Apple warns they may grow.
_APNS_TOKEN = re.compile(r"^[0-9A-Fa-f]{64,200}$")
_BASE64URL = re.compile(r"^[A-Za-z0-9_-]+={0,2}$")
_IDENT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}$")
# Public for schemas (OpenAPI patterns) that must agree with the parsers below.
IDENTIFIER_PATTERN: str = _IDENT.pattern
HHMM_PATTERN: str = _HHMM.pattern
_FULL_DAY_NAMES = {
    full: full[:3]
    for full in ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
}


def parse_hhmm(value: object, field: str) -> time:
    """``"HH:MM"`` on a 24-hour clock, two digits each; "24:00" and "9:7" are refused."""
    if not isinstance(value, str) or not (m := _HHMM.fullmatch(value)):
        raise DomainError(field, f"expected a local time 'HH:MM' (00:00-23:59), got {value!r}")
    return time(int(m.group(1)), int(m.group(2)))


def format_hhmm(value: time) -> str:
    return f"{value.hour:02d}:{value.minute:02d}"


def parse_days(values: Iterable[str] | None, field: str = "days") -> tuple[str, ...]:
    """Weekday names in week order; ``None`` means every day, an empty list is refused."""
    if values is None:
        return WEEKDAYS
    chosen = set()
    for v in values:
        name = v.strip().lower() if isinstance(v, str) else ""
        name = _FULL_DAY_NAMES.get(name, name)  # "Monday" -> "mon"; "monkey" stays refused
        if name not in WEEKDAYS:
            raise DomainError(field, f"unknown weekday {v!r} (use {', '.join(WEEKDAYS)})")
        chosen.add(name)
    if not chosen:
        raise DomainError(field, "must name at least one weekday (omit it for every day)")
    return tuple(d for d in WEEKDAYS if d in chosen)


def parse_quiet_hours(start: object, end: object, field: str = "quiet_hours") -> QuietHours:
    qh = QuietHours(parse_hhmm(start, f"{field}.start"), parse_hhmm(end, f"{field}.end"))
    if qh.start == qh.end:
        raise DomainError(f"{field}.end", "must differ from start (use null for no quiet hours)")
    return qh


def is_expo_push_token(token: str) -> bool:
    """Both spellings Expo issues: ``ExponentPushToken[…]`` and ``ExpoPushToken[…]``."""
    return bool(_EXPO_TOKEN.fullmatch(token))


def _is_webpush_subscription(token: str) -> bool:
    """A browser's ``PushSubscription.toJSON()`` as a string: an https ``endpoint`` and
    the base64url ``keys.p256dh`` and ``keys.auth`` the payload is encrypted to."""
    try:
        sub = json.loads(token)
    except ValueError:
        return False
    keys = sub.get("keys") if isinstance(sub, dict) else None
    if not isinstance(keys, dict) or not str(sub.get("endpoint", "")).startswith("https://"):
        return False
    return all(_is_base64url(keys.get(k)) for k in ("p256dh", "auth"))


def _is_base64url(value: object) -> bool:
    if not isinstance(value, str) or not _BASE64URL.fullmatch(value):
        return False
    try:
        unb64url(value)
    except ValueError:
        return False
    return True


# What each kind's token looks like, and how the error says it.
_TOKEN_SHAPES: dict[str, tuple[Callable[[str], bool], str]] = {
    "expo": (is_expo_push_token, "an Expo push token 'ExponentPushToken[…]'"),
    "fcm": (lambda t: bool(_FCM_TOKEN.fullmatch(t)), "an FCM registration token"),
    "apns": (lambda t: bool(_APNS_TOKEN.fullmatch(t)), "an APNs device token (64-200 hex)"),
    "webpush": (
        _is_webpush_subscription,
        "a Web Push subscription as JSON {endpoint: https URL, keys: {p256dh, auth}}",
    ),
}


def check_push_kind(
    kind: object, sendable: Collection[str] = PUSH_KINDS, field: str = "kind"
) -> str:
    """One of ``PUSH_KINDS`` that this deployment can send to (``sendable``)."""
    if not isinstance(kind, str) or kind not in PUSH_KINDS:
        raise DomainError(field, f"unknown push kind {kind!r} (use {', '.join(PUSH_KINDS)})")
    if kind not in sendable:
        raise DomainError(field, f"no {kind} push provider is configured in this deployment")
    return kind


def check_push_token(token: object, kind: str = "expo", field: str = "push_token") -> str:
    """``token`` if it has the shape of a ``kind`` token (a known kind)."""
    is_shaped, expected = _TOKEN_SHAPES[kind]
    if not isinstance(token, str) or not is_shaped(token):
        raise DomainError(field, f"expected {expected}")
    return token


def check_identifier(value: object, field: str) -> str:
    """Ids in paths and keys: 1-128 of letters, digits and ``._:@-``."""
    if not isinstance(value, str) or not _IDENT.fullmatch(value):
        raise DomainError(field, "expected 1-128 characters of letters, digits and ._:@-")
    return value
