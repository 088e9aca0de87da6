"""The registry of apps and their keys on MongoDB (issue 23).

``apps``: one document per app, ``_id`` its id. ``app_keys``: one per key, ``_id`` its
hash, its id unique too (``indexes.py``).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pymongo import ReturnDocument

from tepat.adapters.mongo.base import MongoBase
from tepat.adapters.mongo.codecs import (
    as_dict,
    bson_dt,
    decoder,
    encoder,
    opt_bson_dt,
    read_dt,
    read_dt_required,
)
from tepat.domain.apps import App, AppKey

APPS = "apps"
APP_KEYS = "app_keys"

_app_doc = encoder(App, "app_id", created_at=bson_dt)
_app = decoder(App, "app_id", settings=as_dict, created_at=read_dt_required)
_key_doc = encoder(
    AppKey,
    "key_hash",
    event_types=lambda types: None if types is None else sorted(types),
    created_at=bson_dt,
    revoked_at=opt_bson_dt,
)
_key = decoder(
    AppKey,
    "key_hash",
    event_types=lambda types: None if types is None else frozenset(types),
    created_at=read_dt_required,
    revoked_at=read_dt,
)


class AppsMixin(MongoBase):
    async def create_app(self, app: App) -> bool:
        return await self._insert_if_new(APPS, _app_doc(app))

    async def get_app(self, app_id: str) -> App | None:
        return await self._fetch_one(_app, APPS, {"_id": app_id})

    async def list_apps(self) -> list[App]:
        return await self._fetch(_app, APPS, {}, sort=["_id"])

    async def update_app(
        self,
        app_id: str,
        *,
        name: str | None = None,
        settings: dict[str, Any] | None = None,
        disabled: bool | None = None,
    ) -> App | None:
        given = {"name": name, "settings": settings, "disabled": disabled}
        update: dict[str, Any] = {"$inc": {"version": 1}}
        changed = {field: value for field, value in given.items() if value is not None}
        if changed:
            update["$set"] = changed  # settings whole: $set replaces the embedded document
        doc = await self._db[APPS].find_one_and_update(
            {"_id": app_id}, update, return_document=ReturnDocument.AFTER
        )
        return None if doc is None else _app(doc)

    async def add_app_key(self, key: AppKey) -> None:
        await self._db[APP_KEYS].insert_one(_key_doc(key))

    async def list_app_keys(self, app_id: str) -> list[AppKey]:
        return await self._fetch(_key, APP_KEYS, {"app_id": app_id}, sort=["created_at", "key_id"])

    async def revoke_app_key(self, app_id: str, key_id: str, at: datetime) -> bool:
        live = {"app_id": app_id, "key_id": key_id, "revoked_at": None}
        return bool(await self._update(APP_KEYS, live, {"$set": {"revoked_at": bson_dt(at)}}))
