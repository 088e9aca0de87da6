"""Preferences: which categories a user receives."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol


class PreferenceRepository(Protocol):
    async def set_preferences(
        self, user_id: str, categories: Mapping[str, bool]
    ) -> dict[str, bool]:
        """Merge ``categories`` into the user's preferences; returns all of them."""

    async def get_preferences(self, user_id: str) -> dict[str, bool]: ...

    async def preferences_for_users(
        self, user_ids: Sequence[str]
    ) -> dict[str, dict[str, bool]]: ...
