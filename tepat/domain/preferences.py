"""Per (category, channel) preferences (issue 12, item 2; issue 13, item 5).

A user's preferences are one flat mapping of keys to booleans, stored as before:

- ``"<category>"``: the category on every channel (the switch that existed first);
- ``"<category>.<channel>"``: the category on one channel (``"marketing.email"``).

The channel key wins where it is set, then the category key, then the default (on):
``{"meal": False, "meal.inbox": True}`` means the inbox only.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

from tepat.domain.errors import DomainError
from tepat.domain.routing import Channel

#: The channels a preference key may name (every recognised channel, enabled or not:
#: a user may opt out of e-mail before the operator turns it on).
PREFERENCE_CHANNELS: tuple[str, ...] = tuple(c.value for c in Channel)


def channel_key(category: str, channel: str) -> str:
    return f"{category}.{channel}"


def allowed(prefs: Mapping[str, bool], category: str, channel: str) -> bool:
    """Whether the user takes ``category`` messages on ``channel``."""
    own = prefs.get(channel_key(category, channel))
    if own is not None:
        return bool(own)
    return bool(prefs.get(category, True))


def check_key(key: str, categories: Collection[str], field: str) -> str:
    """A preference key naming a known category, and a known channel after the last
    dot if it has one. A category whose own name has a dot (a configured one may) is
    read whole first."""
    if key in categories:
        return key
    category, dot, channel = key.rpartition(".")
    if dot and category in categories:
        if channel in PREFERENCE_CHANNELS:
            return key
        raise DomainError(
            field, f"unknown channel {channel!r} (known: {', '.join(PREFERENCE_CHANNELS)})"
        )
    known = ", ".join(sorted(categories))
    raise DomainError(
        field,
        f"unknown category {(category if dot else key)!r} (known: {known});"
        " a key is '<category>' or '<category>.<channel>'",
    )


def view(stored: Mapping[str, bool], categories: Collection[str]) -> dict[str, bool]:
    """What the API shows: every category key (on unless stored otherwise), then the
    channel keys the user set, for categories still configured."""
    out = {name: bool(stored.get(name, True)) for name in categories}
    for key in sorted(stored):
        if key in out:
            continue
        category, dot, channel = key.rpartition(".")
        if dot and category in categories and channel in PREFERENCE_CHANNELS:
            out[key] = bool(stored[key])
    return out
