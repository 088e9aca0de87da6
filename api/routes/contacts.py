"""``/v1/users/{user_id}/contacts``: a user's e-mail address and phone number."""

from __future__ import annotations

from typing import Annotated

from fastapi import Path, Response

from api.auth import AuthError
from api.deps import RT, Caller, UserId, user_router
from api.pagination import Page
from api.schemas import ContactIn, ContactList, ContactOut
from tepat.services import contacts

router = user_router("/contacts", tag="contacts")

ChannelPath = Annotated[
    str, Path(max_length=16, description="`email` or `sms`", examples=["email"])
]


@router.put(
    "/{channel}",
    summary="Set the user's e-mail address or phone number",
)
async def put_contact(
    user_id: UserId, channel: ChannelPath, body: ContactIn, rt: RT, caller: Caller
) -> ContactOut:
    """Replaces the user's contact on that channel. Messages already planned go to the
    address set when they are sent, not the one set when they were planned.

    `verified` is the backend's word (the admin key): a user token asking for
    `verified: true` is a 403 naming it. A user re-saving the address already stored
    keeps its verification; a new address starts unverified."""
    verified: bool | None = body.verified
    if caller.user_id is not None:
        if body.verified:
            raise AuthError(
                403, "only the backend (admin key) marks a contact verified", field="verified"
            )
        verified = None
    contact = await contacts.set_contact(rt, user_id, channel, body.address, verified)
    return ContactOut.of(contact)


@router.delete(
    "/{channel}", status_code=204, response_class=Response, summary="Remove a contact point"
)
async def delete_contact(user_id: UserId, channel: ChannelPath, rt: RT) -> None:
    """Idempotent; messages on that channel are then skipped ``no_contact``."""
    await contacts.remove_contact(rt, user_id, channel)


@router.get("", summary="List the user's contact points")
async def list_contacts(user_id: UserId, rt: RT, page: Page) -> ContactList:
    """By channel (one contact per channel)."""
    found, next_cursor = page.cut(
        await contacts.list_contacts(rt, user_id), key=lambda c: c.channel
    )
    return ContactList(contacts=[ContactOut.of(c) for c in found], next_cursor=next_cursor)
