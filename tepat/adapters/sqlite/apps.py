"""The registry of apps and their keys on SQLite (migration 18, issue 23)."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from tepat.adapters.sqlite.codecs import _decoder, _dt, _dt_opt, _encoder, _ts, _ts_opt
from tepat.adapters.sqlite.connection import SqliteBase
from tepat.domain.apps import App, AppKey

_APP_COLUMNS = "app_id, name, settings, version, created_at, disabled"
_KEY_COLUMNS = "key_hash, key_id, app_id, role, poster, event_types, created_at, revoked_at"
_SELECT_APP = f"SELECT {_APP_COLUMNS} FROM apps"
_SELECT_KEY = f"SELECT {_KEY_COLUMNS} FROM app_keys"


def _settings_json(settings: dict[str, Any]) -> str:
    return json.dumps(settings, separators=(",", ":"), sort_keys=True)


def _types_json(types: frozenset[str] | None) -> str | None:
    return None if types is None else json.dumps(sorted(types))


_app_params = _encoder(_APP_COLUMNS, settings=_settings_json, created_at=_ts, disabled=int)
_app = _decoder(App, _APP_COLUMNS, settings=json.loads, version=int, created_at=_dt, disabled=bool)
_key_params = _encoder(_KEY_COLUMNS, event_types=_types_json, created_at=_ts, revoked_at=_ts_opt)
_key = _decoder(
    AppKey,
    _KEY_COLUMNS,
    event_types=lambda types: None if types is None else frozenset(json.loads(types)),
    created_at=_dt,
    revoked_at=_dt_opt,
)


class AppsMixin(SqliteBase):
    async def create_app(self, app: App) -> bool:
        return await self._insert_new("apps", _APP_COLUMNS, _app_params(app))

    async def get_app(self, app_id: str) -> App | None:
        return await self._fetch_one(_app, f"{_SELECT_APP} WHERE app_id = ?", (app_id,))

    async def list_apps(self) -> list[App]:
        return await self._fetch(_app, f"{_SELECT_APP} ORDER BY app_id")

    async def update_app(
        self,
        app_id: str,
        *,
        name: str | None = None,
        settings: dict[str, Any] | None = None,
        disabled: bool | None = None,
    ) -> App | None:
        # coalesce keeps what is not given; one statement, so the version bump and the
        # change it stands for are never apart.
        sql = (
            "UPDATE apps SET name = coalesce(?, name), settings = coalesce(?, settings), "
            "disabled = coalesce(?, disabled), version = version + 1 "
            f"WHERE app_id = ? RETURNING {_APP_COLUMNS}"
        )
        params = (
            name,
            None if settings is None else _settings_json(settings),
            None if disabled is None else int(disabled),
            app_id,
        )
        rows = await self._write(lambda c: c.execute(sql, params).fetchall())
        return _app(rows[0]) if rows else None

    async def add_app_key(self, key: AppKey) -> None:
        sql = f"INSERT INTO app_keys ({_KEY_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
        await self._execute(sql, _key_params(key))

    async def list_app_keys(self, app_id: str) -> list[AppKey]:
        sql = f"{_SELECT_KEY} WHERE app_id = ? ORDER BY created_at, key_id"
        return await self._fetch(_key, sql, (app_id,))

    async def revoke_app_key(self, app_id: str, key_id: str, at: datetime) -> bool:
        sql = (
            "UPDATE app_keys SET revoked_at = ? "
            "WHERE app_id = ? AND key_id = ? AND revoked_at IS NULL"
        )
        return await self._execute(sql, (_ts(at), app_id, key_id)) == 1
