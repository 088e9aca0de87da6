"""``/v1/users/{user_id}/reminders``: recurring notifications at a local time."""

from __future__ import annotations

from fastapi import Response

from api.deps import RT, ReminderId, UserId, answer_created, user_router
from api.pagination import Page
from api.problems import problem_responses
from api.schemas import ReminderIn, ReminderList, ReminderOut
from tepat.services import accounts

router = user_router("/reminders", tag="reminders")


@router.put(
    "/{reminder_id}",
    responses={
        201: {"model": ReminderOut, "description": "Created"},
        **problem_responses(409),
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
        **body.model_dump(),
        max_reminders=rt.settings.max_reminders_per_user,
    )
    answer_created(response, created)
    return ReminderOut.of(reminder)


@router.delete(
    "/{reminder_id}",
    status_code=204,
    response_class=Response,
    summary="Delete a reminder and cancel its pending messages",
)
async def delete_reminder(user_id: UserId, reminder_id: ReminderId, rt: RT) -> None:
    await accounts.delete_reminder(rt, user_id, reminder_id)


@router.get("", summary="List the user's reminders")
async def list_reminders(user_id: UserId, rt: RT, page: Page) -> ReminderList:
    """By reminder id."""
    reminders, next_cursor = page.cut(
        await accounts.list_reminders(rt, user_id), key=lambda r: r.reminder_id
    )
    return ReminderList(reminders=[ReminderOut.of(r) for r in reminders], next_cursor=next_cursor)
