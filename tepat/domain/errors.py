"""Errors the domain raises on bad input; the API turns them into problem+json."""

from __future__ import annotations

import enum
from typing import TypeVar

E = TypeVar("E", bound=enum.Enum)


class DomainError(ValueError):
    """Invalid input, naming the offending field so callers can report it."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


def enum_member(kind: type[E], value: object, field: str, message: str) -> E:
    """``kind(value)``, or a DomainError naming ``field`` with ``message``."""
    try:
        return kind(value)
    except ValueError:
        raise DomainError(field, message) from None


class ConfigError(SystemExit):
    """A bad configuration value; its message is the one line to print (exit status 2 from
    the CLI). Here, at the bottom of the layers, so that whatever reads configuration
    (the settings, the tracing variables) can raise it."""


class PushTokenInUse(Exception):
    """The push token is active on another user's device, and this caller may not move it
    (only the backend may: a phone that changed hands)."""

    def __init__(self) -> None:
        super().__init__("push_token: active on another user's device")
