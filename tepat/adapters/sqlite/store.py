"""The Store on SQLite, composed of one mixin per aggregate over the shared connection."""

from __future__ import annotations

from operator import itemgetter

from tepat.adapters.sqlite.apps import AppsMixin
from tepat.adapters.sqlite.bulk import BulkMixin
from tepat.adapters.sqlite.connection import SqliteBase
from tepat.adapters.sqlite.contacts import ContactsMixin
from tepat.adapters.sqlite.events import EventsMixin
from tepat.adapters.sqlite.inbox import InboxMixin
from tepat.adapters.sqlite.messages_read import MessagesReadMixin
from tepat.adapters.sqlite.messages_write import MessagesWriteMixin
from tepat.adapters.sqlite.ops_views import OpsViewsMixin
from tepat.adapters.sqlite.presence import PresenceMixin
from tepat.adapters.sqlite.reminders import RemindersMixin
from tepat.adapters.sqlite.replan import ReplanMixin
from tepat.adapters.sqlite.templates import TemplatesMixin
from tepat.adapters.sqlite.tickets import TicketsMixin
from tepat.adapters.sqlite.users import UsersMixin
from tepat.adapters.sqlite.webhooks import WebhooksMixin


class SqliteStore(
    UsersMixin,
    RemindersMixin,
    BulkMixin,
    ReplanMixin,
    MessagesWriteMixin,
    MessagesReadMixin,
    TicketsMixin,
    OpsViewsMixin,
    PresenceMixin,
    TemplatesMixin,
    InboxMixin,
    EventsMixin,
    ContactsMixin,
    WebhooksMixin,
    AppsMixin,
    SqliteBase,
):
    """The :class:`tepat.ports.store.Store` on one SQLite file."""

    async def ping(self) -> None:
        await self._select("SELECT 1")

    @property
    def unavailable_errors(self) -> tuple[type[Exception], ...]:
        # A file has no server to lose; a held lock is waited out (busy_timeout), and
        # what sqlite3 raises after that is not told apart from a bug by its type.
        return ()

    async def get_meta(self, key: str) -> str | None:
        return await self._fetch_one(itemgetter(0), "SELECT value FROM meta WHERE key = ?", (key,))

    async def set_meta(self, key: str, value: str) -> None:
        sql = "INSERT INTO meta VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value"
        await self._execute(sql, (key, value))
