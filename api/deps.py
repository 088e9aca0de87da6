"""Shared route dependencies."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Depends, Path, Request

from api.auth import Principal, admin_access, events_access, user_access
from tepat.domain.validation import IDENTIFIER_PATTERN
from tepat.runtime import Runtime


def runtime(request: Request) -> Runtime:
    rt: Runtime = request.app.state.runtime
    return rt


RT = Annotated[Runtime, Depends(runtime)]
# The path's user id, once the caller is allowed to reach it.
UserId = Annotated[str, Depends(user_access)]
Admin = Annotated[Principal, Depends(admin_access)]
# The admin key or an app key (TEPAT_APP_KEYS): the events API.
EventsCaller = Annotated[Principal, Depends(events_access)]


def id_path(description: str, example: str) -> Any:
    return Path(
        description=description,
        min_length=1,
        max_length=128,
        pattern=IDENTIFIER_PATTERN,
        examples=[example],
    )


DeviceId = Annotated[
    str, id_path("Your id for the device (stable across token rotation)", "phone-1")
]
ReminderId = Annotated[str, id_path("Your id for the reminder", "lunch")]
