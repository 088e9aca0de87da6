"""The Store port, the source of truth: every repository of ``tepat/ports/repositories/``
in one object, which each adapter provides whole; services name only the ones they use.
"""

from __future__ import annotations

from typing import Protocol

from tepat.ports.repositories.apps import AppRepository
from tepat.ports.repositories.bulk_import import BulkImportRepository
from tepat.ports.repositories.contacts import ContactRepository
from tepat.ports.repositories.devices import DeviceRepository
from tepat.ports.repositories.events import EventRepository
from tepat.ports.repositories.inbox import InboxRepository
from tepat.ports.repositories.messages import MessageRepository
from tepat.ports.repositories.meta import MetaRepository
from tepat.ports.repositories.ops_views import OpsViewRepository
from tepat.ports.repositories.outbox import OutboxRepository
from tepat.ports.repositories.preferences import PreferenceRepository
from tepat.ports.repositories.presence import PresenceRepository
from tepat.ports.repositories.provider_events import ProviderEventRepository
from tepat.ports.repositories.reminders import ReminderRepository
from tepat.ports.repositories.replan import ReplanRepository
from tepat.ports.repositories.templates import TemplateRepository
from tepat.ports.repositories.tickets import TicketRepository
from tepat.ports.repositories.users import UserRepository
from tepat.ports.repositories.webhooks import WebhookRepository


class Store(
    UserRepository,
    DeviceRepository,
    ReminderRepository,
    BulkImportRepository,
    ReplanRepository,
    PreferenceRepository,
    MessageRepository,
    OutboxRepository,
    TicketRepository,
    OpsViewRepository,
    PresenceRepository,
    TemplateRepository,
    InboxRepository,
    EventRepository,
    ContactRepository,
    ProviderEventRepository,
    WebhookRepository,
    MetaRepository,
    AppRepository,
    Protocol,
):
    async def open(self) -> None:
        """Connect, create or migrate the schema and indexes (idempotent)."""

    async def close(self) -> None: ...

    async def ping(self) -> None:
        """Raise if the store cannot be reached."""

    @property
    def unavailable_errors(self) -> tuple[type[Exception], ...]:
        """The exceptions that mean "the store cannot answer now, try again later", not a
        bug or bad data: the API answers them 503 with Retry-After."""
