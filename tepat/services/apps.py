"""Managing the apps of a deployment and their keys (issue 23): the deployment admin's
use cases (``api/routes/apps.py``) over the registry the default app's store holds.

The default app is not made here: it is the deployment as it was before apps, and always
exists. A key is shown once, when it is made; the registry keeps its hash only.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from tepat.clock import Clock
from tepat.domain.apps import (
    DEFAULT_APP,
    KEY_ROLES,
    MAX_APPS,
    MAX_KEYS_PER_APP,
    App,
    AppKey,
    KeyRole,
    new_key,
    unknown_app_settings,
    valid_app_id,
)
from tepat.domain.errors import DomainError
from tepat.domain.routing import check_event_type_name
from tepat.ports.repositories.apps import AppRepository
from tepat.services.accounts import FieldConflict, NotFound

MAX_NAME_LEN = 100
_ID_RULE = "1-31 lower-case letters, digits and '-', starting with a letter"


class AppService:
    def __init__(
        self,
        repo: AppRepository,
        clock: Clock,
        check_settings: Callable[[dict[str, Any]], None],
    ) -> None:
        """``check_settings``: the composition root's check of the values (a URL, a
        rate, a file that must exist), raising DomainError naming ``settings.<name>``."""
        self._repo = repo
        self._clock = clock
        self._check_settings = check_settings

    async def create(
        self, app_id: str, name: str, settings: dict[str, Any]
    ) -> tuple[App, AppKey, str]:
        """The new app, its first admin key, and that key in clear (shown only now)."""
        if not valid_app_id(app_id):
            raise DomainError("app_id", f"expected {_ID_RULE}")
        if app_id == DEFAULT_APP:
            raise FieldConflict("app_id", "the default app always exists")
        app = App(app_id, _checked_name(name), self._clock.now(), self._checked(settings))
        if len(await self._repo.list_apps()) >= MAX_APPS:
            raise FieldConflict("app_id", f"a deployment holds at most {MAX_APPS} apps")
        if not await self._repo.create_app(app):
            raise FieldConflict("app_id", f"an app {app_id!r} exists")
        key, plain = await self._new_key(app_id, "admin", None, None)
        return app, key, plain

    async def update(
        self,
        app_id: str,
        name: str | None = None,
        settings: dict[str, Any] | None = None,
        disabled: bool | None = None,
    ) -> App:
        """Change what is given (``settings`` whole); the version moves on."""
        app = await self._repo.update_app(
            app_id,
            name=None if name is None else _checked_name(name),
            settings=None if settings is None else self._checked(settings),
            disabled=disabled,
        )
        if app is None:
            raise NotFound("app", app_id)
        return app

    async def get(self, app_id: str) -> App:
        app = await self._repo.get_app(app_id)
        if app is None:
            raise NotFound("app", app_id)
        return app

    async def list_apps(self) -> list[App]:
        return await self._repo.list_apps()

    async def keys(self, app_id: str) -> list[AppKey]:
        """The app's keys, revoked ones too, oldest first. The default app has keys too
        (beside TEPAT_ADMIN_API_KEY and TEPAT_APP_KEYS), though no record."""
        await self._known(app_id)
        return await self._repo.list_app_keys(app_id)

    async def _known(self, app_id: str) -> None:
        if app_id != DEFAULT_APP:
            await self.get(app_id)

    async def add_key(
        self,
        app_id: str,
        role: str,
        poster: str | None = None,
        event_types: Iterable[str] | None = None,
    ) -> tuple[AppKey, str]:
        """A new key and its value in clear (the only time it is shown). An events key
        posts as ``poster`` (the app's id if not given), only ``event_types`` if given."""
        checked = _checked_role(role)
        if checked == "admin" and (poster is not None or event_types is not None):
            field = "poster" if poster is not None else "event_types"
            raise DomainError(field, "only an events key posts events")
        if checked == "events":
            poster = app_id if poster is None else poster
            # Its events are ``<poster>:<id>``: no ':' in it, and the app id's alphabet.
            if not valid_app_id(poster):
                raise DomainError("poster", f"expected {_ID_RULE}")
        types = None if event_types is None else _checked_types(event_types)
        keys = await self.keys(app_id)
        if sum(k.active for k in keys) >= MAX_KEYS_PER_APP:
            raise FieldConflict(
                "keys", f"an app holds at most {MAX_KEYS_PER_APP} active keys; revoke one"
            )
        return await self._new_key(app_id, checked, poster, types)

    async def revoke_key(self, app_id: str, key_id: str) -> None:
        """Revoke the app's key; NotFound if the app has no such active key."""
        await self._known(app_id)
        if not await self._repo.revoke_app_key(app_id, key_id, self._clock.now()):
            raise NotFound("key", key_id)

    async def _new_key(
        self,
        app_id: str,
        role: KeyRole,
        poster: str | None,
        event_types: frozenset[str] | None,
    ) -> tuple[AppKey, str]:
        key, key_id, key_hash = new_key()
        made = AppKey(key_id, key_hash, app_id, role, self._clock.now(), poster, event_types)
        await self._repo.add_app_key(made)
        return made, key

    def _checked(self, settings: dict[str, Any]) -> dict[str, Any]:
        if unknown := unknown_app_settings(settings):
            raise DomainError(f"settings.{unknown[0]}", "not a setting an app may hold")
        self._check_settings(settings)
        return dict(settings)


def _checked_name(name: str) -> str:
    name = name.strip()
    if not name or len(name) > MAX_NAME_LEN:
        raise DomainError("name", f"expected 1-{MAX_NAME_LEN} characters")
    return name


def _checked_role(role: str) -> KeyRole:
    for known in KEY_ROLES:
        if role == known:
            return known
    raise DomainError("role", f"expected one of {', '.join(KEY_ROLES)}")


def _checked_types(event_types: Iterable[str]) -> frozenset[str]:
    if isinstance(event_types, str):
        raise DomainError("event_types", "expected a list of event types")
    types = frozenset(check_event_type_name(t, "event_types") for t in event_types)
    if not types:
        raise DomainError("event_types", "name at least one type (omit it for every type)")
    return types
