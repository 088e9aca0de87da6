"""Status webhook subscriptions and the status journal on SQLite (migration 11).

The journal rows are written by triggers on ``messages`` and ``inbox`` (schema.py), in the
same statement as the status change; this module reads and drops them.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from tepat.adapters.sqlite.codecs import Row, _decoder, _dt, _dt_opt, _encoder, _ts, _ts_opt
from tepat.adapters.sqlite.connection import SqliteBase, _in_chunks
from tepat.domain.webhooks import StatusChangeEntry, WebhookSecret, WebhookSubscription

_COLUMNS = (
    "id, url, event_types, categories, secrets, description, enabled, disabled_reason, "
    "version, created_at, updated_at"
)
_SELECT = f"SELECT {_COLUMNS} FROM webhook_subscriptions"


def _secrets_json(secrets: Sequence[WebhookSecret]) -> str:
    return json.dumps(
        [
            {
                "secret": s.secret,
                "created_at": _ts(s.created_at),
                "expires_at": _ts_opt(s.expires_at),
            }
            for s in secrets
        ],
        separators=(",", ":"),
    )


_params = _encoder(
    _COLUMNS,
    event_types=lambda types: json.dumps(list(types)),
    categories=lambda categories: json.dumps(list(categories)),
    secrets=_secrets_json,
    enabled=int,
    created_at=_ts,
    updated_at=_ts,
)


_subscription = _decoder(
    WebhookSubscription,
    _COLUMNS,
    event_types=lambda types: tuple(json.loads(types)),
    categories=lambda categories: tuple(json.loads(categories)),
    secrets=lambda secrets: tuple(
        WebhookSecret(s["secret"], _dt(s["created_at"]), _dt_opt(s["expires_at"]))
        for s in json.loads(secrets)
    ),
    enabled=bool,
    version=int,
    created_at=_dt,
    updated_at=_dt,
)


def _entry(row: Row) -> StatusChangeEntry:
    seq, message_id, status, user_id, category, at, reason, channel = row
    return StatusChangeEntry(
        str(seq), message_id, status, user_id, category, _dt(at), reason, channel
    )


class WebhooksMixin(SqliteBase):
    async def create_webhook_subscription(self, sub: WebhookSubscription) -> bool:
        return await self._insert_new("webhook_subscriptions", _COLUMNS, _params(sub))

    async def get_webhook_subscription(self, subscription_id: str) -> WebhookSubscription | None:
        sql = f"{_SELECT} WHERE id = ?"
        return await self._fetch_one(_subscription, sql, (subscription_id,))

    async def list_webhook_subscriptions(self) -> list[WebhookSubscription]:
        return await self._fetch(_subscription, f"{_SELECT} ORDER BY created_at, id")

    async def update_webhook_subscription(
        self, sub: WebhookSubscription, expect_version: int
    ) -> bool:
        changed = dict(zip(_COLUMNS.split(", "), _params(sub), strict=True))
        del changed["id"], changed["created_at"]  # the two that never change
        sets = ", ".join(f"{column} = ?" for column in changed)
        sql = f"UPDATE webhook_subscriptions SET {sets} WHERE id = ? AND version = ?"
        return await self._execute(sql, (*changed.values(), sub.id, expect_version)) == 1

    async def delete_webhook_subscription(self, subscription_id: str) -> bool:
        sql = "DELETE FROM webhook_subscriptions WHERE id = ?"
        return await self._execute(sql, (subscription_id,)) == 1

    async def webhook_journal(self, limit: int) -> list[StatusChangeEntry]:
        sql = (
            "SELECT seq, message_id, status, user_id, category, at, reason, channel "
            "FROM webhook_journal ORDER BY seq LIMIT ?"
        )
        return await self._fetch(_entry, sql, (max(0, limit),))

    async def drop_webhook_journal(self, entries: Sequence[StatusChangeEntry]) -> int:
        seqs = [int(e.key) for e in entries]
        sql = "DELETE FROM webhook_journal WHERE seq IN ({ids}) RETURNING seq"
        return len(await self._write(lambda c: _in_chunks(c, sql, seqs))) if seqs else 0
