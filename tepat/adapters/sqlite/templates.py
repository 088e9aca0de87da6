"""Message templates: an append-only table of versions (migration 6)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from tepat.adapters.sqlite.codecs import Row, _dt, _ts
from tepat.adapters.sqlite.connection import SqliteBase
from tepat.adapters.sqlite.schema import Conn
from tepat.domain.routing import Channel
from tepat.domain.templates import Template, TemplateKey

_COLUMNS = "event_type, channel, locale, version, parts, content_hash, created_at"
_BY_KEY = f"SELECT {_COLUMNS} FROM templates WHERE event_type = ? AND channel = ? AND locale = ?"
_LATEST = f"{_BY_KEY} ORDER BY version DESC LIMIT 1"


def _template(row: Row) -> Template:
    return Template(
        key=TemplateKey(row[0], Channel(row[1]), row[2]),
        version=int(row[3]),
        parts=json.loads(row[4]),
        content_hash=row[5],
        created_at=_dt(row[6]),
    )


class TemplatesMixin(SqliteBase):
    async def add_template_version(
        self, key: TemplateKey, parts: Mapping[str, Any], content_hash: str, now: datetime
    ) -> tuple[Template, bool]:
        k = (key.event_type, key.channel.value, key.locale)
        encoded = json.dumps(parts, ensure_ascii=False, separators=(",", ":"))

        # One BEGIN IMMEDIATE transaction: the read of the latest version and the insert
        # of the next are serialised against every other writer, so versions are distinct.
        def run(conn: Conn) -> tuple[Row, bool]:
            latest = conn.execute(_LATEST, k).fetchone()
            if latest is not None and latest[5] == content_hash:
                return latest, False
            version = 1 if latest is None else int(latest[3]) + 1
            row = (*k, version, encoded, content_hash, _ts(now))
            conn.execute(f"INSERT INTO templates ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?)", row)
            return row, True

        row, created = await self._write(run)
        return _template(row), created

    async def get_template(self, key: TemplateKey, version: int | None = None) -> Template | None:
        k = (key.event_type, key.channel.value, key.locale)
        if version is None:
            return await self._fetch_one(_template, _LATEST, k)
        return await self._fetch_one(_template, f"{_BY_KEY} AND version = ?", (*k, version))

    async def latest_templates(self, event_type: str | None = None) -> list[Template]:
        where, params = ("WHERE event_type = ?", (event_type,)) if event_type else ("", ())
        # With one max(), SQLite takes the other columns from the row that has it.
        sql = (
            f"SELECT {_COLUMNS}, max(version) FROM templates {where} "
            "GROUP BY event_type, channel, locale ORDER BY event_type, channel, locale"
        )
        return await self._fetch(_template, sql, params)
