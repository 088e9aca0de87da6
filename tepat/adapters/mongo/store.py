"""The MongoDB store: the production adapter of :class:`tepat.ports.store.Store`.

Written against PyMongo's own asyncio API (``pymongo.AsyncMongoClient``). Motor,
which the product card names, is deprecated (end of life May 2026) and PyMongo's
async client replaces it (docs/PRINCIPLES.md §6).

The uniqueness guarantees live in :mod:`tepat.adapters.mongo.indexes`; the
document formats and the millisecond rule for instants in
:mod:`tepat.adapters.mongo.codecs`.
"""

from __future__ import annotations

from tepat.adapters.mongo.apps import AppsMixin
from tepat.adapters.mongo.bulk import BulkMixin
from tepat.adapters.mongo.client import UNAVAILABLE_ERRORS, connect
from tepat.adapters.mongo.contacts import ContactsMixin
from tepat.adapters.mongo.events import EventsMixin
from tepat.adapters.mongo.inbox import InboxMixin
from tepat.adapters.mongo.indexes import create_indexes, migrate
from tepat.adapters.mongo.messages import MessagesMixin
from tepat.adapters.mongo.ops_views import OpsViewsMixin
from tepat.adapters.mongo.outbox import OutboxMixin
from tepat.adapters.mongo.presence import PresenceMixin
from tepat.adapters.mongo.reminders import RemindersMixin
from tepat.adapters.mongo.replan import ReplanMixin
from tepat.adapters.mongo.templates import TemplatesMixin
from tepat.adapters.mongo.tickets import TicketsMixin
from tepat.adapters.mongo.users import UsersMixin
from tepat.adapters.mongo.webhooks import WebhooksMixin


class MongoStore(
    BulkMixin,  # over UsersMixin: a batch falls back to register_device
    ReplanMixin,
    UsersMixin,
    RemindersMixin,
    MessagesMixin,
    OutboxMixin,
    TicketsMixin,
    OpsViewsMixin,
    PresenceMixin,
    TemplatesMixin,
    InboxMixin,
    EventsMixin,
    ContactsMixin,
    WebhooksMixin,
    AppsMixin,
):
    """:class:`tepat.ports.store.Store` on MongoDB through ``pymongo.AsyncMongoClient``.

    ``client`` lets tests inject another client with the same async API (the
    mongomock facade in ``tests/support``); it is then not closed by :meth:`close`.
    """

    async def open(self) -> None:
        if self._client is None:
            self._client = connect(self._url)
        await migrate(self._db)
        await create_indexes(self._db)

    async def close(self) -> None:
        if self._client is not None and self._owns_client:
            await self._client.close()
            self._client = None

    async def ping(self) -> None:
        await self._db.command("ping")

    @property
    def unavailable_errors(self) -> tuple[type[Exception], ...]:
        return UNAVAILABLE_ERRORS

    async def get_meta(self, key: str) -> str | None:
        return await self._fetch_one(lambda doc: str(doc["value"]), "meta", {"_id": key})

    async def set_meta(self, key: str, value: str) -> None:
        await self._db["meta"].update_one({"_id": key}, {"$set": {"value": value}}, upsert=True)
