"""The repositories the send path reads and writes, named for the services that take them."""

from __future__ import annotations

from typing import Protocol

from tepat.ports.repositories.contacts import ContactRepository
from tepat.ports.repositories.devices import DeviceRepository
from tepat.ports.repositories.messages import MessageRepository
from tepat.ports.repositories.preferences import PreferenceRepository
from tepat.ports.repositories.reminders import ReminderRepository
from tepat.ports.repositories.tickets import TicketRepository
from tepat.ports.repositories.users import UserRepository


class OutcomeRecords(MessageRepository, ContactRepository, Protocol):
    """The outcome recorder's: the messages whose answers it writes and the suppressions a
    refusal adds."""


class ChannelSendRecords(OutcomeRecords, Protocol):
    """The channel sender's: the messages it records and the contacts and suppressions it
    resolves targets from (and suppresses)."""


class DispatchRecords(
    ChannelSendRecords,
    UserRepository,
    DeviceRepository,
    ReminderRepository,
    PreferenceRepository,
    TicketRepository,
    Protocol,
):
    """The dispatcher's: what it checks before a send (the user, their devices, reminders
    and preferences), the tickets it keeps, and what its channel sender needs."""
