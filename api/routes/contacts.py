"""``/v1/users/{user_id}/contacts``: a user's e-mail address and phone number."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Response

from api.contact_schemas import ContactIn, ContactList, ContactOut
from api.deps import RT, UserId
from api.problems import problem_responses
from tepat.services import contacts

router = APIRouter(
    prefix="/v1/users/{user_id}/contacts",
    tags=["contacts"],
    responses=problem_responses(401, 403, 404, 422),
)

ChannelPath = Annotated[
    str, Path(max_length=16, description="`email` or `sms`", examples=["email"])
]


@router.put(
    "/{channel}",
    response_model=ContactOut,
    responses=problem_responses(400, 413),
    summary="Set the user's e-mail address or phone number",
)
async def put_contact(user_id: UserId, channel: ChannelPath, body: ContactIn, rt: RT) -> ContactOut:
    """Replaces the user's contact on that channel. Messages already planned go to the
    address set when they are sent, not the one set when they were planned."""
    contact = await contacts.set_contact(rt, user_id, channel, body.address, body.verified)
    return ContactOut.of(contact)


@router.delete(
    "/{channel}", status_code=204, response_class=Response, summary="Remove a contact point"
)
async def delete_contact(user_id: UserId, channel: ChannelPath, rt: RT) -> Response:
    """Idempotent; messages on that channel are then skipped ``no_contact``."""
    await contacts.remove_contact(rt, user_id, channel)
    return Response(status_code=204)


@router.get("", response_model=ContactList, summary="List the user's contact points")
async def list_contacts(user_id: UserId, rt: RT) -> ContactList:
    return ContactList(
        contacts=[ContactOut.of(c) for c in await contacts.list_contacts(rt, user_id)]
    )
