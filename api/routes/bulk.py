"""``/v1/bulk/users``: import many whole users (devices and reminders included) at once.

The body is a JSON array of users, or NDJSON (``Content-Type: application/x-ndjson``,
one user per line). Each item is checked like the single endpoints and answered on
its own (``created``, ``updated``, ``unchanged`` or ``error`` with the problem the
single endpoint would have given, its fields named from the request's root); a bad
item never fails the others. The work itself is :mod:`tepat.services.bulk_import`.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any, Final

from fastapi import Request
from pydantic import TypeAdapter, ValidationError

from api.deps import RT, admin_router
from api.problems import (
    FieldError,
    Problem,
    ProblemError,
    error_message,
    problem_responses,
    summary,
)
from api.schemas import BulkImportOut, BulkItemOut, BulkUserIn, QuietHoursBody
from tepat.services import bulk_import
from tepat.services.accounts import ReminderItem
from tepat.services.bulk_import import (
    MAX_ITEMS,
    DeviceItem,
    FieldProblem,
    InvalidItem,
    ItemResult,
    QuietHoursItem,
    UserItem,
    item_field,
)

PATH: Final = "/v1/bulk/users"
# MAX_ITEMS users with a few devices and reminders each fit with room to spare.
MAX_BODY_BYTES: Final = 8 * 1024 * 1024
NDJSON_TYPES: Final = frozenset({"application/x-ndjson", "application/jsonl"})
JSON_TYPES: Final = frozenset({"application/json", ""})

router = admin_router("bulk", tag="bulk")

_BODY_DOC = {
    "required": True,
    "description": f"At most {MAX_ITEMS} users: a JSON array, or NDJSON (one user per line)",
    "content": {
        "application/json": {
            "schema": {
                "type": "array",
                "maxItems": MAX_ITEMS,
                "items": {"$ref": "#/components/schemas/BulkUserIn"},
            }
        },
        "application/x-ndjson": {
            "schema": {"$ref": "#/components/schemas/BulkUserIn"},
        },
    },
}


@router.post(
    "/users",
    responses=problem_responses(415),
    summary="Import users with their devices and reminders",
    openapi_extra={"requestBody": _BODY_DOC},
)
async def import_users(request: Request, rt: RT) -> BulkImportOut:
    """Create or update each user, its devices and its reminders, as the single `PUT`s
    would (fields left out keep their value; devices and reminders not named are kept).
    Repeating an import changes nothing and plans nothing twice. Store writes are
    batched per request and the users it creates are planned in one pass."""
    raw = _read_items(request.headers.get("content-type", ""), await request.body())
    items = [_parse_item(i, obj) for i, obj in enumerate(raw)]
    results = await bulk_import.import_users(rt, items)
    counts = Counter(r.status for r in results)
    return BulkImportOut(
        items=[_item_out(r) for r in results],
        created=counts["created"],
        updated=counts["updated"],
        unchanged=counts["unchanged"],
        errors=counts["error"],
    )


def _read_items(content_type: str, body: bytes) -> list[Any]:
    """The items as :class:`BulkUserIn` where they are valid, else as decoded JSON
    values (checked one by one in :func:`_parse_item`); a line of NDJSON that is not
    JSON stays an :class:`InvalidItem` of its own."""
    media = content_type.split(";", 1)[0].strip().lower()
    if media not in NDJSON_TYPES and media not in JSON_TYPES:
        raise ProblemError(
            415, "send application/json (an array) or application/x-ndjson", "content-type"
        )
    if media not in NDJSON_TYPES:
        try:
            # The usual body, every item valid: parsed and checked in one pass of
            # pydantic's JSON parser. Anything else takes the item-by-item way below,
            # which finds the same items valid and names what is wrong with the rest.
            users = _USERS.validate_json(body)
        except ValidationError:
            pass
        else:
            _check_count(len(users))
            return users
    try:
        text = body.decode()
    except UnicodeDecodeError:
        raise ProblemError(400, "request body is not UTF-8", "body") from None
    if media in NDJSON_TYPES:
        # Only "\n" ends a line: str.splitlines would also split inside a JSON string
        # holding a raw U+2028 or U+0085, which JSON allows unescaped.
        lines = [line for line in text.split("\n") if line.strip()]
        _check_count(len(lines))
        items: list[Any] = []
        for line in lines:
            try:
                items.append(BulkUserIn.model_validate_json(line))
                continue
            except ValidationError:
                pass  # read it again below: not JSON, or which field is wrong
            try:
                items.append(json.loads(line))
            except (ValueError, RecursionError):  # nested too deep is not JSON we read
                items.append(_BAD_LINE)
        if items and all(i is _BAD_LINE for i in items):
            raise ProblemError(400, "request body is not NDJSON (no line is JSON)", "body")
        return items
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        raise ProblemError(400, "request body is not valid JSON", "body") from None
    if not isinstance(value, list):
        raise ProblemError(
            422, "expected a JSON array of users (or NDJSON, one user per line)", "body"
        )
    _check_count(len(value))
    return value


def _check_count(n: int) -> None:
    if n > MAX_ITEMS:
        raise ProblemError(422, f"at most {MAX_ITEMS} items per request, got {n}", "items")


_BAD_LINE: Final = object()
_USERS: Final = TypeAdapter(list[BulkUserIn])


def _parse_item(index: int, obj: Any) -> UserItem | InvalidItem:
    user_id = obj.get("user_id") if isinstance(obj, dict) else None
    user_id = user_id if isinstance(user_id, str) else None
    if obj is _BAD_LINE:
        return InvalidItem(None, [FieldProblem(item_field(index), "this line is not JSON")])
    try:
        body = obj if isinstance(obj, BulkUserIn) else BulkUserIn.model_validate(obj)
    except ValidationError as e:
        problems = [
            FieldProblem(item_field(index, err.get("loc", ())), error_message(err))
            for err in e.errors()
        ]
        return InvalidItem(user_id, problems)
    qh = body.given("quiet_hours")
    return UserItem(
        user_id=body.user_id,
        timezone=body.timezone,
        locale=body.given("locale"),
        quiet_hours=QuietHoursItem(qh.start, qh.end) if isinstance(qh, QuietHoursBody) else qh,
        enabled=body.given("enabled"),
        devices=[DeviceItem(d.device_id, d.push_token, d.platform, d.kind) for d in body.devices],
        reminders=[ReminderItem(**r.model_dump()) for r in body.reminders],
    )


def _item_out(r: ItemResult) -> BulkItemOut:
    problem = None
    if r.errors:
        errors = [FieldError(field=p.field, message=p.message) for p in r.errors]
        problem = Problem(
            title="Unprocessable Entity", status=422, detail=summary(errors), errors=errors
        )
    return BulkItemOut(index=r.index, user_id=r.user_id, status=r.status, problem=problem)
