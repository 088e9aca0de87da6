"""``/v1/users/{user_id}/devices``: push tokens, one active per device."""

from __future__ import annotations

from fastapi import Response

from api.deps import RT, Caller, DeviceId, UserId, user_router
from api.pagination import Page
from api.problems import problem_responses
from api.schemas import DeviceIn, DeviceList, DeviceOut
from tepat.services import accounts
from tepat.wiring import webpush_endpoint_check

router = user_router("/devices", tag="devices")


@router.put(
    "/{device_id}",
    responses=problem_responses(409),
    summary="Register a device or rotate its token",
)
async def put_device(
    user_id: UserId, device_id: DeviceId, body: DeviceIn, rt: RT, caller: Caller
) -> DeviceOut:
    """The token becomes this device's one active token; if it was bound to another
    device of this user, that binding is deactivated. A token active on another user's
    device is a 409 naming `push_token` with a user token; the admin key moves it (a
    phone that changed hands). A new device past `TEPAT_MAX_DEVICES_PER_USER` active
    ones is a 409 naming `device_id`. A token not shaped for its `kind` is a 422 naming
    `push_token`, as is a Web Push endpoint on a private address (the rule of webhooks'
    URLs); a kind this deployment has no push provider for, a 422 naming `kind` (an app
    learns at once that nothing could send to the device)."""
    device = await accounts.register_device(
        rt,
        user_id,
        device_id,
        body.push_token,
        body.platform,
        kind=body.kind,
        fallback=None if body.fallback is None else (body.fallback.kind, body.fallback.token),
        from_other_users=caller.user_id is None,
        max_devices=rt.settings.max_devices_per_user,
        check_endpoint=webpush_endpoint_check(rt.settings),
    )
    return DeviceOut.of(device)


@router.delete(
    "/{device_id}", status_code=204, response_class=Response, summary="Deactivate a device"
)
async def delete_device(user_id: UserId, device_id: DeviceId, rt: RT) -> None:
    await accounts.deactivate_device(rt, user_id, device_id)


@router.get("", summary="List the user's devices")
async def list_devices(user_id: UserId, rt: RT, page: Page) -> DeviceList:
    """By device id, inactive ones included."""
    devices, next_cursor = page.cut(
        await accounts.list_devices(rt, user_id), key=lambda d: d.device_id
    )
    return DeviceList(devices=[DeviceOut.of(d) for d in devices], next_cursor=next_cursor)
