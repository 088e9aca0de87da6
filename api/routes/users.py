"""``/v1/users/{user_id}``: the user's zone, locale, quiet hours and enablement."""

from __future__ import annotations

from fastapi import APIRouter, Response

from api.deps import RT, UserId, answer_created
from api.problems import problem_responses
from api.schemas import QuietHoursBody, UserIn, UserOut
from tepat.domain.validation import parse_quiet_hours
from tepat.services import accounts

router = APIRouter(prefix="/v1/users", tags=["users"])


@router.put(
    "/{user_id}",
    responses={201: {"model": UserOut, "description": "Created"}},
    summary="Create or update a user",
)
async def put_user(user_id: UserId, body: UserIn, rt: RT, response: Response) -> UserOut:
    """Fields left out keep their value; changing `timezone` or `quiet_hours` re-plans
    the user's pending messages (the superseded ones end `cancelled`)."""
    qh = body.given("quiet_hours")
    user, created = await accounts.put_user(
        rt,
        user_id,
        timezone=body.timezone,
        locale=body.given("locale"),
        quiet_hours=parse_quiet_hours(qh.start, qh.end) if isinstance(qh, QuietHoursBody) else qh,
        enabled=body.given("enabled"),
    )
    answer_created(response, created)
    return UserOut.of(user)


@router.get("/{user_id}", responses=problem_responses(404), summary="Get a user")
async def get_user(user_id: UserId, rt: RT) -> UserOut:
    return UserOut.of(await accounts.get_user(rt, user_id))
