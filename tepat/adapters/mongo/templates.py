"""Message templates: one document per version, ``_id`` the template id, never updated.

The unique index on (event_type, channel, locale, version) (``indexes.py``) is what keeps
two concurrent PUTs from writing the same version: the loser of the race reads the
latest again and takes the next number.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from tepat.adapters.mongo.base import QUERY_MAX_TIME_MS, MongoBase, sort_spec
from tepat.adapters.mongo.codecs import bson_dt, read_dt_required
from tepat.domain.routing import Channel
from tepat.domain.templates import Template, TemplateKey, template_id

# Each retry follows another writer's successful insert, so this bounds only how many
# writers may race on one key at once before one gives up.
MAX_INSERT_ATTEMPTS = 50


def _filter(key: TemplateKey) -> dict[str, Any]:
    return {"event_type": key.event_type, "channel": key.channel.value, "locale": key.locale}


def _template(doc: Mapping[str, Any]) -> Template:
    return Template(
        key=TemplateKey(doc["event_type"], Channel(doc["channel"]), doc["locale"]),
        version=int(doc["version"]),
        parts=dict(doc["parts"]),
        content_hash=doc["content_hash"],
        created_at=read_dt_required(doc["created_at"]),
    )


class TemplatesMixin(MongoBase):
    async def add_template_version(
        self, key: TemplateKey, parts: Mapping[str, Any], content_hash: str, now: datetime
    ) -> tuple[Template, bool]:
        for _ in range(MAX_INSERT_ATTEMPTS):
            latest = await self.get_template(key)
            if latest is not None and latest.content_hash == content_hash:
                return latest, False
            version = 1 if latest is None else latest.version + 1
            doc = {
                "_id": template_id(key, version),
                **_filter(key),
                "version": version,
                "parts": dict(parts),
                "content_hash": content_hash,
                "created_at": bson_dt(now),
            }
            if await self._insert_if_new("templates", doc):
                return _template(doc), True
            # Another writer took this version: read the latest again.
        raise RuntimeError(f"could not add a version of {key} after {MAX_INSERT_ATTEMPTS} tries")

    async def get_template(self, key: TemplateKey, version: int | None = None) -> Template | None:
        query = _filter(key) if version is None else {**_filter(key), "version": version}
        found = await self._fetch(_template, "templates", query, sort=["-version"], limit=1)
        return found[0] if found else None

    async def latest_templates(self, event_type: str | None = None) -> list[Template]:
        key = ["event_type", "channel", "locale"]
        pipeline = [
            {"$match": {"event_type": event_type} if event_type else {}},
            {"$sort": dict(sort_spec([*key, "-version"]))},
            {"$group": {"_id": {k: f"${k}" for k in key}, "doc": {"$first": "$$ROOT"}}},
            {"$replaceRoot": {"newRoot": "$doc"}},
            {"$sort": dict(sort_spec(key))},
        ]
        cursor = await self._db["templates"].aggregate(pipeline, maxTimeMS=QUERY_MAX_TIME_MS)
        return [_template(d) for d in await cursor.to_list(None)]
