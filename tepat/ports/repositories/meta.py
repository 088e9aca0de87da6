"""Store-wide settings kept by key (e.g. the tz database release last planned with)."""

from __future__ import annotations

from typing import Protocol


class MetaRepository(Protocol):
    async def get_meta(self, key: str) -> str | None: ...

    async def set_meta(self, key: str, value: str) -> None: ...
