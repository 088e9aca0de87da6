"""``/v1/users/{user_id}/preferences``: opt in or out per category."""

from __future__ import annotations

from api.deps import RT, UserId, user_router
from api.schemas import PreferencesIn, PreferencesOut
from tepat.services import accounts

router = user_router("/preferences", tag="preferences")


@router.put("", summary="Set preferences")
async def put_preferences(user_id: UserId, body: PreferencesIn, rt: RT) -> PreferencesOut:
    """Merges: categories not named keep their setting. Checked at send time, so an
    opt-out also stops messages already planned."""
    return PreferencesOut(categories=await accounts.set_preferences(rt, user_id, body.categories))


@router.get("", summary="Get preferences")
async def get_preferences(user_id: UserId, rt: RT) -> PreferencesOut:
    return PreferencesOut(categories=await accounts.get_preferences(rt, user_id))
