"""Parsing of user-supplied values, with errors that name the field."""

from __future__ import annotations

import re
from collections.abc import Iterable
from datetime import time

from tepat.domain.errors import DomainError
from tepat.domain.models import WEEKDAYS, QuietHours

_HHMM = re.compile(r"^([01][0-9]|2[0-3]):([0-5][0-9])$")
_EXPO_TOKEN = re.compile(r"^(ExponentPushToken|ExpoPushToken)\[[^\[\]\s]{1,200}\]$")
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


def check_push_token(token: object, field: str = "push_token") -> str:
    if not isinstance(token, str) or not is_expo_push_token(token):
        raise DomainError(field, "expected an Expo push token 'ExponentPushToken[…]'")
    return token


def check_identifier(value: object, field: str) -> str:
    """Ids in paths and keys: 1-128 of letters, digits and ``._:@-``."""
    if not isinstance(value, str) or not _IDENT.fullmatch(value):
        raise DomainError(field, "expected 1-128 characters of letters, digits and ._:@-")
    return value
