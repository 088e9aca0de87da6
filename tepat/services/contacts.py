"""Use cases behind the contacts and suppressions API (issue 13, items 4 and 5).

Addresses are normalised before they are stored or looked up. Suppressions added here
come from an operator (``source="admin"``); providers' come through their callbacks.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from tepat.clock import Clock
from tepat.domain.b64url import b64url, unb64url
from tepat.domain.contacts import (
    Contact,
    Suppression,
    check_channel,
    check_reason,
    normalise_address,
)
from tepat.domain.errors import DomainError
from tepat.ports.repositories.contacts import ContactRepository
from tepat.ports.repositories.users import UserRepository
from tepat.services.accounts import NotFound, get_user

MAX_PAGE = 500


@dataclass(frozen=True, slots=True)
class SuppressionPage:
    items: list[Suppression]
    next_cursor: str | None


class ContactRecords(UserRepository, ContactRepository, Protocol): ...


class ContactParts(Protocol):
    """What the contact use cases are given; the runtime has these and more."""

    @property
    def store(self) -> ContactRecords: ...

    @property
    def clock(self) -> Clock: ...


async def set_contact(
    rt: ContactParts, user_id: str, channel: str, address: object, verified: bool | None
) -> Contact:
    """``verified=None`` (a user's own change): the stored verification holds while the
    address stays the same; a new address starts unverified."""
    channel = check_channel(channel, "channel")
    normalised = normalise_address(channel, address, "address")
    await get_user(rt, user_id)
    if verified is None:
        stored = [c for c in await rt.store.list_contacts(user_id) if c.channel == channel]
        verified = bool(stored) and stored[0].address == normalised and stored[0].verified
    now = rt.clock.now()
    await rt.store.set_contact(user_id, channel, normalised, verified, now)
    return Contact(user_id, channel, normalised, verified, now)


async def remove_contact(rt: ContactParts, user_id: str, channel: str) -> None:
    channel = check_channel(channel, "channel")
    await get_user(rt, user_id)
    await rt.store.set_contact(user_id, channel, None, False, rt.clock.now())


async def list_contacts(rt: ContactParts, user_id: str) -> list[Contact]:
    await get_user(rt, user_id)
    return await rt.store.list_contacts(user_id)


async def add_suppression(
    rt: ContactParts, channel: str, address: object, reason: object
) -> tuple[Suppression, bool]:
    """The suppression as stored (a stronger reason may have replaced a weaker one, an
    existing one keeps its own otherwise) and whether it is new."""
    channel = check_channel(channel, "channel")
    normalised = normalise_address(channel, address, "address")
    why = check_reason(reason, "reason")
    created = await rt.store.add_suppression(
        channel, normalised, why, rt.clock.now(), source="admin"
    )
    stored = (await rt.store.suppressions_for(channel, [normalised]))[normalised]
    return stored, created


async def lift_suppression(rt: ContactParts, channel: str, address: str) -> None:
    channel = check_channel(channel, "channel")
    normalised = normalise_address(channel, address, "address")
    if not await rt.store.lift_suppression(channel, normalised):
        raise NotFound("suppression", f"{channel}/{normalised}")


async def list_suppressions(
    rt: ContactParts, channel: str | None, cursor: str | None, limit: int
) -> SuppressionPage:
    if channel is not None:
        channel = check_channel(channel, "channel")
    after = decode_cursor(cursor) if cursor else None
    limit = max(1, min(limit, MAX_PAGE))
    # One more than asked: whether a next page exists without an empty last request.
    rows = await rt.store.list_suppressions(channel, after, limit + 1)
    items = rows[:limit]
    more = len(rows) > limit
    return SuppressionPage(
        items, encode_cursor(items[-1].channel, items[-1].address) if more else None
    )


def encode_cursor(channel: str, address: str) -> str:
    return b64url(f"{channel}\n{address}".encode())


def decode_cursor(cursor: str) -> tuple[str, str]:
    try:
        raw = unb64url(cursor).decode()
    except ValueError:  # binascii.Error and UnicodeDecodeError are ValueErrors
        raise DomainError("cursor", "not a cursor this API returned") from None
    channel, newline, address = raw.partition("\n")
    if not newline or not address:
        raise DomainError("cursor", "not a cursor this API returned")
    return channel, address
