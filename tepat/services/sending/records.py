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


class OutcomeRecords(MessageRepository, ContactRepository, TicketRepository, Protocol):
    """The outcome recorder's: the messages whose answers it writes, the suppressions a
    refusal adds and the tickets an accepted push keeps."""


class DispatchRecords(
    OutcomeRecords,
    UserRepository,
    DeviceRepository,
    ReminderRepository,
    PreferenceRepository,
    Protocol,
):
    """The send path's: what it checks before a send (the user, their devices, reminders
    and preferences), the contacts it resolves targets from, and what it records."""
