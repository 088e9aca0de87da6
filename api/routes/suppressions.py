"""``/v1/suppressions``: addresses Tepat does not send to (admin API key only)."""

from __future__ import annotations

from typing import Annotated

from fastapi import Path, Query, Response

from api.deps import RT, admin_router, answer_created
from api.pagination import Cursor
from api.problems import problem_responses
from api.schemas import SuppressionAdded, SuppressionIn, SuppressionOut, SuppressionPageOut
from tepat.services import contacts

router = admin_router("suppressions", tag="suppressions")


@router.get("", summary="List suppressions")
async def list_suppressions(
    rt: RT,
    channel: Annotated[
        str | None, Query(max_length=16, description="Only this channel: `email` or `sms`")
    ] = None,
    cursor: Cursor = None,
    limit: Annotated[int, Query(ge=1, le=contacts.MAX_PAGE, description="Page size")] = 100,
) -> SuppressionPageOut:
    """By channel, then address."""
    page = await contacts.list_suppressions(rt, channel, cursor, limit)
    return SuppressionPageOut(
        items=[SuppressionOut.of(s) for s in page.items], next_cursor=page.next_cursor
    )


@router.post(
    "",
    response_model=SuppressionAdded,
    status_code=201,
    responses={200: {"description": "Already suppressed", "model": SuppressionAdded}},
    summary="Suppress an address",
)
async def add_suppression(body: SuppressionIn, rt: RT, response: Response) -> SuppressionAdded:
    """201 when new; 200 when it was already suppressed (it keeps its first reason
    unless this one is stronger: complaint over hard_bounce over the rest)."""
    stored, created = await contacts.add_suppression(rt, body.channel, body.address, body.reason)
    answer_created(response, created)
    return SuppressionAdded(**SuppressionOut.of(stored).model_dump(), created=created)


@router.delete(
    "/{channel}/{address}",
    status_code=204,
    response_class=Response,
    responses=problem_responses(404),
    summary="Lift a suppression",
)
async def lift_suppression(
    rt: RT,
    channel: Annotated[str, Path(max_length=16, examples=["sms"])],
    address: Annotated[str, Path(max_length=320, examples=["+6281234567890"])],
) -> None:
    """Sends to the address resume. 404 when it was not suppressed."""
    await contacts.lift_suppression(rt, channel, address)
