"""Apps' settings encrypted at rest: the rule of ``secret_box.py``, for the app registry.

An app's settings hold its provider tokens and passwords. With ``TEPAT_SECRETS_KEY`` the
whole settings object is written as one sealed value, ``{"_sealed": "enc:v1:<token>"}``
(so no setting's name or value shows, and no list of which ones are secret has to be
kept up to date); without it, as it is. Reading opens what is sealed and passes plain
settings through, so an app stored before the key was set keeps working, and its next
update writes it sealed. ``_sealed`` is no setting's name (``APP_SETTINGS``), so the two
forms never meet.
"""

from __future__ import annotations

import dataclasses
import json
from datetime import datetime
from typing import Any

from tepat.adapters.secret_box import SecretBox
from tepat.domain.apps import App, AppKey
from tepat.ports.repositories.apps import AppRepository

SEALED = "_sealed"


def seal_settings(box: SecretBox, settings: dict[str, Any]) -> dict[str, Any]:
    text = json.dumps(settings, separators=(",", ":"), sort_keys=True)
    sealed = box.seal(text)
    # Without a key the box hands the text back as it is: keep the plain object then.
    return settings if sealed == text else {SEALED: sealed}


def open_settings(box: SecretBox, stored: dict[str, Any]) -> dict[str, Any]:
    if set(stored) != {SEALED}:
        return stored
    opened: dict[str, Any] = json.loads(box.open(stored[SEALED]))
    return opened


class SealedApps:
    """An :class:`AppRepository` whose apps' settings are sealed by ``box``."""

    def __init__(self, inner: AppRepository, box: SecretBox) -> None:
        self._inner = inner
        self._box = box

    def _opened(self, app: App) -> App:
        return dataclasses.replace(app, settings=open_settings(self._box, app.settings))

    async def create_app(self, app: App) -> bool:
        sealed = dataclasses.replace(app, settings=seal_settings(self._box, app.settings))
        return await self._inner.create_app(sealed)

    async def get_app(self, app_id: str) -> App | None:
        app = await self._inner.get_app(app_id)
        return None if app is None else self._opened(app)

    async def list_apps(self) -> list[App]:
        return [self._opened(a) for a in await self._inner.list_apps()]

    async def update_app(
        self,
        app_id: str,
        *,
        name: str | None = None,
        settings: dict[str, Any] | None = None,
        disabled: bool | None = None,
    ) -> App | None:
        sealed = None if settings is None else seal_settings(self._box, settings)
        app = await self._inner.update_app(app_id, name=name, settings=sealed, disabled=disabled)
        return None if app is None else self._opened(app)

    async def add_app_key(self, key: AppKey) -> None:
        await self._inner.add_app_key(key)

    async def list_app_keys(self, app_id: str) -> list[AppKey]:
        return await self._inner.list_app_keys(app_id)

    async def revoke_app_key(self, app_id: str, key_id: str, at: datetime) -> bool:
        return await self._inner.revoke_app_key(app_id, key_id, at)
