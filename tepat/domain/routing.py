"""Event types and where their messages go: category, priority, channel routes.

Configured by ``TEPAT_EVENT_TYPES`` (:func:`parse_event_types`). A route may name
``email`` or ``sms`` only when its provider is configured, so a configuration routing to
a channel nobody can send on stops the process instead of leaving messages pending.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tepat.domain.categories import Categories
from tepat.domain.errors import DomainError, enum_member


class Channel(enum.StrEnum):
    PUSH = "push"
    INBOX = "inbox"
    EMAIL = "email"  # routable when TEPAT_SMTP_HOST is set
    SMS = "sms"  # routable when TEPAT_TWILIO_ACCOUNT_SID is set


#: Channels a template may name (a route: those whose provider is configured).
ENABLED_CHANNELS: frozenset[Channel] = frozenset(Channel)
#: Channels every configuration can send on.
ALWAYS_ENABLED: frozenset[Channel] = frozenset({Channel.PUSH, Channel.INBOX})


class Priority(enum.StrEnum):
    CRITICAL = "critical"  # OTP, safety: their own queues, never behind bulk
    NORMAL = "normal"
    BULK = "bulk"  # campaigns


PRIORITY_ERROR = "expected critical, normal or bulk"


class Condition(enum.StrEnum):
    """When a route is taken, evaluated per recipient at fan-out."""

    ALWAYS = "always"
    ACTIVE_DEVICE = "active_device"  # the user has at least one active push device
    FALLBACK = "fallback"  # only when no earlier route of the list was taken


#: ``order.paid``, ``invoice.overdue``: two to eight lower-case segments joined by dots.
EVENT_TYPE_PATTERN = r"^[a-z][a-z0-9_]{0,31}(\.[a-z][a-z0-9_]{0,31}){1,7}$"
_EVENT_TYPE = re.compile(EVENT_TYPE_PATTERN)
MAX_EVENT_TYPE_LEN = 128
MAX_ROUTES = 8


def check_event_type_name(value: object, field: str = "type") -> str:
    if (
        not isinstance(value, str)
        or len(value) > MAX_EVENT_TYPE_LEN
        or not _EVENT_TYPE.fullmatch(value)
    ):
        raise DomainError(
            field,
            "expected a lower-case dotted name such as 'order.paid' (2-8 segments of"
            f" a-z, 0-9 and _, each starting with a letter), got {value!r}",
        )
    return value


def parse_channel(
    value: object, field: str = "channel", enabled: frozenset[Channel] = ENABLED_CHANNELS
) -> Channel:
    """A channel name that is enabled; a recognised but disabled one says so."""
    try:
        if not isinstance(value, str):
            raise ValueError(value)
        channel = Channel(value)
    except ValueError:
        known = ", ".join(sorted(Channel))
        raise DomainError(field, f"unknown channel {value!r} (available: {known})") from None
    if channel not in enabled:
        raise DomainError(
            field,
            f"channel {channel.value!r} has no provider configured (available:"
            f" {', '.join(sorted(enabled))}; e-mail needs TEPAT_SMTP_HOST, SMS"
            " TEPAT_TWILIO_ACCOUNT_SID)",
        )
    return channel


@dataclass(frozen=True, slots=True)
class Route:
    channel: Channel
    when: Condition = Condition.ALWAYS


@dataclass(frozen=True, slots=True)
class EventType:
    name: str
    category: str
    priority: Priority = Priority.NORMAL
    routes: tuple[Route, ...] = (Route(Channel.INBOX),)

    @property
    def channels(self) -> tuple[Channel, ...]:
        return tuple(r.channel for r in self.routes)


def select_channels(routes: Sequence[Route], *, has_active_device: bool) -> list[Channel]:
    """The channels one recipient gets, in route order."""
    chosen: list[Channel] = []
    for route in routes:
        if route.when is Condition.ALWAYS:
            take = True
        elif route.when is Condition.ACTIVE_DEVICE:
            take = has_active_device
        else:  # FALLBACK
            take = not chosen
        if take:
            chosen.append(route.channel)
    return chosen


class EventTypes:
    """The configured event types, looked up by name."""

    def __init__(self, types: Iterable[EventType]) -> None:
        self._by_name = {t.name: t for t in types}

    def __contains__(self, name: object) -> bool:
        return name in self._by_name

    def __iter__(self) -> Iterator[EventType]:
        return iter(self._by_name.values())

    def __len__(self) -> int:
        return len(self._by_name)

    @property
    def names(self) -> list[str]:
        return sorted(self._by_name)

    def get(self, name: str, field: str = "type") -> EventType:
        try:
            return self._by_name[name]
        except KeyError:
            known = ", ".join(self.names) or "none configured"
            raise DomainError(
                field, f"unknown event type {name!r} (configured: {known}; see TEPAT_EVENT_TYPES)"
            ) from None


def default_event_types(categories: Categories) -> EventTypes:
    """The built-in set, used when ``TEPAT_EVENT_TYPES`` is unset; one whose category is
    not configured is left out rather than stopping the process (nobody asked for it)."""
    return EventTypes(t for t in DEFAULT_EVENT_TYPES if t.category in categories)


_INBOX_THEN_PUSH = (Route(Channel.INBOX), Route(Channel.PUSH, Condition.ACTIVE_DEVICE))

DEFAULT_EVENT_TYPES: tuple[EventType, ...] = (
    EventType("order.paid", "custom", Priority.NORMAL, _INBOX_THEN_PUSH),
    EventType("invoice.overdue", "custom", Priority.NORMAL, _INBOX_THEN_PUSH),
    # A code nobody can read in time is useless: push only, on the critical queues,
    # under safety (bypasses quiet hours). SMS joins with the companion issue.
    EventType(
        "otp.requested",
        "safety",
        Priority.CRITICAL,
        (Route(Channel.PUSH, Condition.ACTIVE_DEVICE),),
    ),
)

_EVENT_KEYS = frozenset({"category", "priority", "channels"})
_ROUTE_KEYS = frozenset({"channel", "when"})


def parse_event_types(
    raw: Mapping[str, Any],
    categories: Categories,
    enabled: frozenset[Channel] = ALWAYS_ENABLED,
) -> EventTypes:
    """``TEPAT_EVENT_TYPES`` as read from JSON (``{"order.paid": {"category": "custom",
    "priority": "normal", "channels": [{"channel": "inbox", "when": "always"}]}}``);
    errors name the place (``order.paid.channels[1].when``). Unknown keys are refused:
    a misspelt ``"chanels"`` must not silently route nowhere.
    """
    if not isinstance(raw, Mapping):
        raise DomainError("", "expected a JSON object of event types")
    types = []
    for name, spec in raw.items():
        check_event_type_name(name, field=str(name))
        types.append(_parse_one(name, spec, categories, enabled))
    return EventTypes(types)


def _parse_one(
    name: str, spec: object, categories: Categories, enabled: frozenset[Channel]
) -> EventType:
    if not isinstance(spec, Mapping):
        raise DomainError(name, "expected an object with category, priority and channels")
    if extra := sorted(set(spec) - _EVENT_KEYS):
        raise DomainError(f"{name}.{extra[0]}", "unknown key (known: category, priority, channels)")
    category = spec.get("category")
    if not isinstance(category, str) or category not in categories:
        known = ", ".join(sorted(categories.names))
        raise DomainError(f"{name}.category", f"expected a configured category ({known})")
    priority = enum_member(
        Priority, spec.get("priority", Priority.NORMAL), f"{name}.priority", PRIORITY_ERROR
    )
    routes = spec.get("channels")
    if not isinstance(routes, list) or not 1 <= len(routes) <= MAX_ROUTES:
        raise DomainError(f"{name}.channels", f"expected a list of 1 to {MAX_ROUTES} routes")
    parsed: list[Route] = []
    for i, route in enumerate(routes):
        where = f"{name}.channels[{i}]"
        if not isinstance(route, Mapping):
            raise DomainError(where, 'expected {"channel": ..., "when": ...}')
        if extra := sorted(set(route) - _ROUTE_KEYS):
            raise DomainError(f"{where}.{extra[0]}", "unknown key (known: channel, when)")
        channel = parse_channel(route.get("channel"), f"{where}.channel", enabled)
        if any(r.channel is channel for r in parsed):
            raise DomainError(f"{where}.channel", f"{channel.value!r} is routed twice")
        when = route.get("when", Condition.ALWAYS)
        expected = "expected always, active_device or fallback"
        parsed.append(Route(channel, enum_member(Condition, when, f"{where}.when", expected)))
    return EventType(name, category, priority, tuple(parsed))
