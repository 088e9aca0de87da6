"""``/v1/users/{user_id}/reminders``: recurring notifications at a local time."""

from __future__ import annotations

from fastapi import APIRouter, Response

from api.deps import RT, ReminderId, UserId
from api.pagination import DEFAULT_LIMIT, Cursor, Limit, cut_page
from api.problems import problem_responses
from api.schemas import ReminderIn, ReminderList, ReminderOut
from tepat.services import accounts

router = APIRouter(
    prefix="/v1/users/{user_id}/reminders",
    tags=["reminders"],
    responses=problem_responses(401, 403, 404, 422),
)


@router.put(
    "/{reminder_id}",
    response_model=ReminderOut,
    responses={
        201: {"model": ReminderOut, "description": "Created"},
        **problem_responses(400, 409, 413),
    },
    summary="Create or replace a reminder",
)
async def put_reminder(
    user_id: UserId, reminder_id: ReminderId, body: ReminderIn, rt: RT, response: Response
) -> ReminderOut:
    """A change re-plans this reminder's pending messages; at most one message per
    local date is ever sent, whatever the changes. A new reminder past
    `TEPAT_MAX_REMINDERS_PER_USER` is a 409 naming `reminder_id`."""
    reminder, created = await accounts.put_reminder(
        rt,
        user_id,
        reminder_id,
        category=body.category,
        local_time=body.local_time,
        title=body.title,
        body=body.body,
        label=body.label,
        days=body.days,
        data=body.data,
        enabled=body.enabled,
        max_reminders=rt.settings.max_reminders_per_user,
    )
    if created:
        response.status_code = 201
    return ReminderOut.of(reminder)


@router.delete(
    "/{reminder_id}",
    status_code=204,
    response_class=Response,
    summary="Delete a reminder and cancel its pending messages",
)
async def delete_reminder(user_id: UserId, reminder_id: ReminderId, rt: RT) -> Response:
    await accounts.delete_reminder(rt, user_id, reminder_id)
    return Response(status_code=204)


@router.get("", response_model=ReminderList, summary="List the user's reminders")
async def list_reminders(
    user_id: UserId, rt: RT, limit: Limit = DEFAULT_LIMIT, cursor: Cursor = None
) -> ReminderList:
    """By reminder id."""
    reminders = await accounts.list_reminders(rt, user_id)
    page, next_cursor = cut_page(reminders, lambda r: r.reminder_id, cursor, limit)
    return ReminderList(reminders=[ReminderOut.of(r) for r in page], next_cursor=next_cursor)
