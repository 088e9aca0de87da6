"""The apps of a deployment and their keys (``tepat/domain/apps.py``).

Held by the default app's store: the registry every process reads to know which apps
to serve and which key belongs to which app. Settings are stored as given: sealing the
secrets in them is the wrapper's (``tepat/adapters/sealed_apps.py``), not the store's.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Protocol

from tepat.domain.apps import App, AppKey


class AppRepository(Protocol):
    async def create_app(self, app: App) -> bool:
        """Store a new app; False (nothing changed) if its id exists."""

    async def get_app(self, app_id: str) -> App | None: ...

    async def list_apps(self) -> list[App]:
        """Every app, disabled ones too, by id."""

    async def update_app(
        self,
        app_id: str,
        *,
        name: str | None = None,
        settings: dict[str, Any] | None = None,
        disabled: bool | None = None,
    ) -> App | None:
        """Replace what is given (``settings`` whole), bump the version; None if unknown."""

    async def add_app_key(self, key: AppKey) -> None: ...

    async def list_app_keys(self, app_id: str) -> list[AppKey]:
        """The app's keys, revoked ones too, oldest first."""

    async def revoke_app_key(self, app_id: str, key_id: str, at: datetime) -> bool:
        """Mark the app's key revoked at ``at``; False if unknown or already revoked."""
