"""The Store port: where users, devices, reminders, preferences, messages and tickets live.

The store is the source of truth (docs/PRINCIPLES.md §1). Idempotency comes from unique
indexes, never from check-then-insert:

- ``messages.dedup_key`` unique: one document per intent and plan version;
- ``messages.live_key`` unique where set: at most one non-cancelled message per
  (user, reminder, local date) or (user, one-off idempotency key), ever;
- ``messages.slot_key`` unique among pending messages (``slot_key_for``: a
  reminder's (user, device, category, label, nominal instant); a one-off's intent);
- one active binding per (user, device id); one active binding per push token.

The transactional outbox: a message is written with an "unpublished" mark in
the same write that inserts it or puts it back to ``pending``;
:meth:`MessageStore.unpublished` and :meth:`MessageStore.mark_published` let one
publisher put them on the broker (``tepat/services/outbox.py``).

Every adapter passes ``tests/contract/test_store_contract.py`` and
``tests/contract/test_store_dashboard_contract.py`` (the dashboard's queries).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Protocol

from tepat.domain.contacts import Contact, Suppression, SuppressionReason
from tepat.domain.events import Event
from tepat.domain.inbox import InboxItem
from tepat.domain.models import Device, Message, MessageStatus, Reminder, Ticket, User
from tepat.domain.templates import Template, TemplateKey
from tepat.domain.webhooks import StatusChangeEntry, WebhookSubscription


@dataclass(frozen=True, slots=True)
class InsertResult:
    created: list[Message]  # the messages this call inserted, in input order
    existing: int  # how many were already there (any unique index)


@dataclass(frozen=True, slots=True)
class StatusChange:
    """One conditional status update, for :meth:`MessageStore.transition_many`."""

    message_id: str
    to: MessageStatus
    reason: str | None = None
    ticket_id: str | None = None
    last_error: str | None = None
    scheduled_at: datetime | None = None
    release_live_key: bool = False
    # Going back to ``pending`` (retry, deferral, re-drive): when to dispatch it
    # next. The store sets the outbox mark in the same write.
    due_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class MessagePage:
    items: list[Message]
    next_cursor: str | None


@dataclass(frozen=True, slots=True)
class MessageQuery:
    user_id: str
    statuses: frozenset[MessageStatus] = frozenset()
    scheduled_from: datetime | None = None  # inclusive
    scheduled_to: datetime | None = None  # exclusive
    limit: int = 50
    cursor: str | None = None  # opaque, from a previous page


@dataclass(frozen=True, slots=True)
class DeviceFailure:
    """What ``record_device_outcome`` decided."""

    deactivated: bool
    consecutive_failures: int


@dataclass(frozen=True, slots=True)
class PlanMark:
    """What a plan run knows it planned for one user: every occurrence whose nominal
    instant lies in ``[plan_from, plan_next_at)`` was planned under the planning
    fingerprint ``fingerprint`` (categories and rules) from the user's state at
    change stamp ``stamp`` (see :meth:`UserStore.set_plan_marks`)."""

    user_id: str
    stamp: int
    plan_from: datetime
    plan_next_at: datetime
    fingerprint: str


@dataclass(frozen=True, slots=True)
class PlanTarget:
    """A user as a plan run reads them: the user, their change stamp at that read,
    and their planning mark if one is standing (none after any change)."""

    user: User
    stamp: int
    mark: PlanMark | None = None


@dataclass(frozen=True, slots=True)
class RecordsWritten:
    """What :meth:`ImportStore.write_records` did: ``created`` as
    :meth:`ImportStore.upsert_users` answers it, and for users it created, their change
    stamp as the write left them, where the store reads it in the same transaction
    (SQLite; empty where it cannot). A later :class:`PlanTarget` with that stamp means
    nothing planning reads changed since: the user has exactly the reminders written."""

    created: list[bool]
    stamps: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Counts:
    by_status_category: dict[tuple[str, str], int] = field(default_factory=dict)


class UserStore(Protocol):
    async def upsert_user(self, user: User) -> User:
        """Create or replace; keeps ``created_at``; ``plan_version`` never goes down
        (the stored one is kept when it is higher: see :meth:`next_plan_version`)."""
        ...

    async def get_user(self, user_id: str) -> User | None: ...

    async def get_users(self, user_ids: Sequence[str]) -> dict[str, User]: ...

    async def next_plan_version(self, user_id: str) -> int:
        """Atomically increment the user's ``plan_version`` and return the new value
        (0 if the user does not exist). Two re-plans never get the same version."""
        ...

    def iter_users(self, batch_size: int = 1000) -> AsyncIterator[list[User]]:
        """All users in ``user_id`` order, a page at a time (keyset, flat memory)."""
        ...

    # Planning marks (tepat/services/planning/creator.py, docs/ARCHITECTURE.md "Plan runs").
    # Every user carries a change stamp: any write that can change what planning
    # makes of them (their zone, quiet hours, enabled flag or plan version; a
    # reminder of theirs inserted, replaced or deleted) increments it and clears
    # their mark, in the same write, whoever the writer is.

    def users_to_plan(
        self,
        start: datetime,
        end: datetime,
        fingerprint: str,
        batch_size: int = 1000,
        after: str = "",
        until: str | None = None,
    ) -> AsyncIterator[list[PlanTarget]]:
        """Users whose ``user_id`` is in ``(after, until]`` (no upper bound when None)
        and whose standing mark does not cover ``[start, end)`` under ``fingerprint``
        (none, another fingerprint, ``plan_from > start`` or ``plan_next_at < end``),
        in ``user_id`` order, a page at a time (keyset, flat memory)."""
        ...

    async def get_plan_target(self, user_id: str) -> PlanTarget | None:
        """One user with their change stamp and standing mark (None if absent)."""
        ...

    async def set_plan_marks(self, marks: Sequence[PlanMark]) -> int:
        """Write each mark only if its user's change stamp still equals ``mark.stamp``
        (compare-and-set: a mark computed from a read older than a change never
        sticks). Returns how many were written."""
        ...

    async def user_id_bounds(self, parts: int) -> list[str]:
        """Up to ``parts - 1`` user ids splitting all users, in order, into ``parts``
        ranges of about equal size (``(after, until]`` for :meth:`users_to_plan`)."""
        ...


class DeviceStore(Protocol):
    async def register_device(self, device: Device, *, from_other_users: bool = True) -> Device:
        """Register or rotate: ``device`` becomes the one active binding of its
        (user, ``device_id``) and of its ``push_token``. A device id is scoped to its
        user: another user's device with the same id is untouched. A token is
        global: its active binding under another user ends ("replaced"), since a
        token that moves is the same phone after a new login; with
        ``from_other_users=False`` such a binding stays and
        :class:`~tepat.domain.errors.PushTokenInUse` is raised instead, atomically with
        the write. Resets the failure counter.
        """
        ...

    async def deactivate_device(self, user_id: str, device_id: str, reason: str) -> bool:
        """True if an active device was deactivated."""
        ...

    async def deactivate_token(self, push_token: str, reason: str) -> int:
        """Deactivate every active binding of a token; returns how many."""
        ...

    async def list_devices(self, user_id: str) -> list[Device]: ...

    async def active_devices(self, user_ids: Sequence[str]) -> dict[str, list[Device]]:
        """Active devices per user (users without one are absent)."""
        ...

    async def record_device_outcome(
        self, push_token: str, ok: bool, max_failures: int, reason: str
    ) -> DeviceFailure:
        """Success resets the consecutive-failure counter; a failure increments it
        and deactivates the token's active binding at ``max_failures``.
        """
        ...


class ReminderStore(Protocol):
    async def upsert_reminder(self, reminder: Reminder) -> Reminder: ...

    async def get_reminder(self, user_id: str, reminder_id: str) -> Reminder | None: ...

    async def delete_reminder(self, user_id: str, reminder_id: str) -> bool: ...

    async def list_reminders(self, user_id: str) -> list[Reminder]: ...

    async def reminders_for_users(self, user_ids: Sequence[str]) -> dict[str, list[Reminder]]: ...


class ImportStore(Protocol):
    """Writes of many users' records at once (the bulk import), each in one round trip or
    transaction where the database allows, with the same per-record rules as the
    single writes above."""

    async def upsert_users(self, users: Sequence[User]) -> list[bool]:
        """:meth:`UserStore.upsert_user` for each; returns, in input order, whether this
        call created the user (exactly one of several concurrent imports of a new user
        sees ``True``)."""
        ...

    async def register_devices(self, devices: Sequence[Device]) -> None:
        """:meth:`DeviceStore.register_device` for each, in input order (a token named
        twice ends bound to the later device)."""
        ...

    async def upsert_reminders(self, reminders: Sequence[Reminder]) -> None:
        """:meth:`ReminderStore.upsert_reminder` for each."""
        ...

    async def write_records(
        self, users: Sequence[User], devices: Sequence[Device], reminders: Sequence[Reminder]
    ) -> RecordsWritten:
        """:meth:`upsert_users`, then :meth:`register_devices`, then
        :meth:`upsert_reminders` (users before what hangs off them), in one transaction
        where the database allows (see :class:`RecordsWritten`)."""
        ...

    async def get_plan_targets(self, user_ids: Sequence[str]) -> dict[str, PlanTarget]:
        """:meth:`UserStore.get_plan_target` for each (unknown users are absent)."""
        ...


class PreferenceStore(Protocol):
    async def set_preferences(
        self, user_id: str, categories: Mapping[str, bool]
    ) -> dict[str, bool]:
        """Merge ``categories`` into the user's preferences; returns all of them."""
        ...

    async def get_preferences(self, user_id: str) -> dict[str, bool]: ...

    async def preferences_for_users(
        self, user_ids: Sequence[str]
    ) -> dict[str, dict[str, bool]]: ...


class MessageStore(Protocol):
    async def insert_messages(self, messages: Sequence[Message]) -> InsertResult:
        """Insert in bulk; a message that violates any unique index is counted as
        existing, not raised. Safe to run concurrently from several processes.
        """
        ...

    async def get_message(self, message_id: str) -> Message | None: ...

    async def get_messages(self, message_ids: Sequence[str]) -> list[Message]: ...

    async def find_by_live_key(self, live_key: str) -> Message | None: ...

    async def claim(
        self, message_ids: Sequence[str], now: datetime, due_before: datetime | None = None
    ) -> list[Message]:
        """Atomically move each ``pending`` message (``tepat.domain.models.CLAIMABLE``) to
        ``sending`` (``claimed_at=now``, ``attempts += 1``) and return those this call
        claimed; a second claimant gets nothing. ``due_before``: only messages whose
        ``due_at`` is before it (a consumer claims a batch whose second has passed
        without reading it first).
        """
        ...

    async def transition(
        self,
        message_id: str,
        to: MessageStatus,
        now: datetime,
        *,
        expect: Sequence[MessageStatus],
        reason: str | None = None,
        ticket_id: str | None = None,
        last_error: str | None = None,
        scheduled_at: datetime | None = None,
        release_live_key: bool = False,
        due_at: datetime | None = None,
    ) -> bool:
        """Conditional update: only if the current status is in ``expect`` *and* the
        domain's transition table (``tepat.domain.models.ALLOWED_TRANSITIONS``) allows
        the move from it to ``to``; any other change is refused like a lost
        compare-and-set (nothing written, False).

        ``release_live_key`` clears ``live_key`` (used when cancelling, so the same
        local date can be planned again). Moving to ``pending`` sets ``due_at``
        (``due_at``, else ``scheduled_at``, else ``now``) and the outbox mark.
        Returns whether the update happened.
        """
        ...

    async def transition_many(
        self, changes: Sequence[StatusChange], now: datetime, *, expect: Sequence[MessageStatus]
    ) -> int:
        """:meth:`transition` for many messages in one round trip (a consumer records
        a whole provider request at once). Returns how many were applied."""
        ...

    async def pending_for_user(self, user_id: str) -> list[Message]:
        """Every pending message of one user (a re-plan compares them with the new plan)."""
        ...

    async def unpublished(
        self,
        limit: int,
        due_before: datetime | None = None,
        after: tuple[datetime, str] | None = None,
    ) -> list[Message]:
        """Pending messages carrying the outbox mark (due before ``due_before`` when
        given), by (``due_at``, id); ``after`` a (``due_at``, id) pair: only those
        after it (pages over messages a pass leaves marked)."""
        ...

    async def unpublished_counts(
        self, due_from: datetime, due_before: datetime
    ) -> dict[tuple[datetime, str, str, str | None], int]:
        """How many pending messages carrying the outbox mark are due at each
        (``due_at``, category, channel, priority) in [``due_from``, ``due_before``):
        what names their queue (``tepat.domain.queues.queue_for``); the publisher reads
        only the seconds that fill a whole batch."""
        ...

    async def mark_published(self, published: Sequence[tuple[str, datetime]]) -> int:
        """Clear the outbox mark of each (id, due_at) whose ``due_at`` is unchanged
        (a message put back to pending meanwhile keeps its mark). Returns how many."""
        ...

    async def republish(self, message_ids: Sequence[str], due_at: datetime) -> int:
        """Pending messages back onto the outbox, due at ``due_at`` (sweeper re-drive)."""
        ...

    async def republish_all_pending(self) -> int:
        """Put every pending message back onto the outbox, keeping its ``due_at``
        (the embedded broker keeps nothing across restarts)."""
        ...

    async def list_messages(self, query: MessageQuery) -> MessagePage:
        """Newest ``scheduled_at`` first, then id; cursor-paginated."""
        ...

    async def due_pending(self, before: datetime, limit: int) -> list[Message]:
        """Published pending messages due (``due_at``) before ``before``, oldest first:
        the broker should have delivered them (sweeper)."""
        ...

    async def stuck_sending(self, claimed_before: datetime, limit: int) -> list[Message]: ...

    async def count_messages(self) -> Counts: ...

    async def dead_letters(self, limit: int, before_id: str | None = None) -> list[Message]:
        """Failed messages, most recently updated first."""
        ...


class TicketStore(Protocol):
    async def add_tickets(self, tickets: Sequence[Ticket]) -> None: ...

    async def tickets_awaiting_receipt(
        self, sent_before: datetime, limit: int, after: tuple[datetime, str] | None = None
    ) -> list[Ticket]:
        """Tickets without a receipt sent before ``sent_before``, by (sent_at, ticket_id),
        starting after the key ``after``: the poller pages through every one, so a
        backlog of tickets whose receipts are not ready never hides newer ones."""
        ...

    async def record_receipt(
        self, ticket_id: str, status: str, error: str | None, now: datetime
    ) -> bool:
        """Set a ticket's receipt once; returns False if it already had one."""
        ...

    async def tickets_for_message(self, message_id: str) -> list[Ticket]: ...


@dataclass(frozen=True, slots=True)
class SendSample:
    """One notification the provider accepted (one ticket): for rates and lateness."""

    category: str
    scheduled_at: datetime  # the message's (lateness counts from it)
    sent_at: datetime  # the ticket's


class PresenceStore(Protocol):
    """Which processes of a group are alive (consumers sharing one rate ceiling)."""

    async def heartbeat(self, group: str, member: str, now: datetime, ttl: timedelta) -> int:
        """Record ``member`` of ``group`` alive at ``now``; return how many members
        (itself included) beat within ``ttl``. Members silent for long are forgotten."""
        ...

    async def leave(self, group: str, member: str) -> None: ...


class OpsViewStore(Protocol):
    """Small read-only queries for the operator dashboard (``tepat/services/dashboard.py``)."""

    async def recent_sends(self, since: datetime, limit: int) -> list[SendSample]:
        """Tickets sent at or after ``since``, newest first (equal instants in any order),
        at most ``limit``, each with its message's category and scheduled instant."""
        ...

    async def failures_since(self, since: datetime) -> dict[str, int]:
        """Messages that ended ``failed`` at or after ``since``, counted by ``status_reason``
        (``""`` for none)."""
        ...

    async def devices_deactivated_since(self, since: datetime) -> dict[str, int]:
        """Device bindings deactivated at or after ``since``, counted by reason
        (``""`` for none)."""
        ...


class TemplateStore(Protocol):
    """Message templates (``tepat/domain/templates.py``): every version kept forever,
    never edited in place; unique on (event type, channel, locale, version)."""

    async def add_template_version(
        self, key: TemplateKey, parts: Mapping[str, Any], content_hash: str, now: datetime
    ) -> tuple[Template, bool]:
        """Append version latest + 1 (1 for a new key) and return it with ``True``; if
        the latest version has ``content_hash``, create nothing and return it with
        ``False`` (a retried PUT). Concurrent calls get distinct versions; identical
        concurrent calls create one."""
        ...

    async def get_template(self, key: TemplateKey, version: int | None = None) -> Template | None:
        """That version, or the latest when ``version`` is None."""
        ...

    async def latest_templates(self, event_type: str | None = None) -> list[Template]:
        """The latest version of every key (of one event type when given), by
        (event type, channel, locale)."""
        ...


class InboxStore(Protocol):
    """The in-app inbox (``tepat/domain/inbox.py``): unique on (user, message id); ``seq``
    assigned from one increasing sequence per store; ``read_at`` set once."""

    async def put_inbox_item(self, item: InboxItem) -> tuple[InboxItem, bool]:
        """Store ``item`` (its ``seq`` ignored) and return it as stored with ``True``; if
        the user already has an item for ``item.message_id``, change nothing and return
        that one with ``False``. Concurrent puts of one message store one item."""
        ...

    async def list_inbox(
        self, user_id: str, limit: int, before_seq: int | None = None, unread_only: bool = False
    ) -> list[InboxItem]:
        """The user's items, newest (highest seq) first, below ``before_seq`` when given."""
        ...

    async def inbox_after(self, user_id: str, after_seq: int, limit: int) -> list[InboxItem]:
        """The user's items with a seq above ``after_seq``, oldest first (a stream's resume)."""
        ...

    async def mark_inbox_read(self, user_id: str, item_id: str, now: datetime) -> InboxItem | None:
        """Set ``read_at`` to ``now`` unless already read; the item, or None if the user
        has no such item."""
        ...

    async def mark_inbox_read_all(
        self, user_id: str, now: datetime, up_to_seq: int | None = None
    ) -> int:
        """Mark every unread item of the user (up to ``up_to_seq`` when given) read at
        ``now``; how many changed."""
        ...

    async def inbox_unread_count(self, user_id: str) -> int: ...


class EventStore(Protocol):
    """Business events and their fan-out (``tepat/domain/events.py``): one row per
    ``event_id``, the listed recipients beside it, and a cursor that only moves forward."""

    async def create_event(self, event: Event, user_ids: Sequence[str]) -> tuple[Event, bool]:
        """Store ``event`` (fanning out, cursor "") with its listed recipients ``user_ids``
        (none for all users) and return it with ``True``; if ``event_id`` exists, change
        nothing and return the stored event with ``False``, except that a stored event
        still ``accepting`` with the same ``request_hash`` gets its recipients completed
        (a retried request finishes what a crash cut short). Concurrent calls create one."""
        ...

    async def get_event(self, event_id: str) -> Event | None: ...

    async def events_fanning_out(self, limit: int) -> list[Event]:
        """Events whose fan-out is not done, oldest first."""
        ...

    async def event_recipients(
        self, event_id: str, all_users: bool, after: str, limit: int
    ) -> list[str]:
        """The next ``limit`` recipient ids above ``after``, in order: every user's when
        ``all_users``, else the event's listed ids (known users or not)."""
        ...

    async def advance_event(
        self,
        event_id: str,
        after: str,
        to: str,
        recipients: int,
        counts: Mapping[str, int],
        done: bool,
        now: datetime,
    ) -> bool:
        """Compare-and-set: only if the event is fanning out with cursor ``after``, move
        the cursor to ``to``, add ``recipients`` and ``counts`` and set ``done``. A page
        done twice (a crash, two loops) is counted once. Returns whether it moved."""
        ...

    async def event_message_counts(self, event_id: str) -> dict[tuple[str, str, str], int]:
        """The event's messages (keys under ``event_key_range``) by (channel, status,
        reason or "")."""
        ...


class ContactStore(Protocol):
    """Contact points, suppressions and provider-callback dedup (``tepat/domain/contacts.py``).

    Addresses arrive normalised (``normalise_address``): the store compares strings.
    One contact per (user, channel); one suppression per (channel, address); one
    provider event per (provider, event id), each held by a unique key.
    """

    async def set_contact(
        self, user_id: str, channel: str, address: str | None, verified: bool, now: datetime
    ) -> None:
        """Set the user's contact point on ``channel`` (``"email"`` or ``"sms"``),
        replacing any; ``address`` None removes it (removing none is no error)."""
        ...

    async def contacts_for_users(self, user_ids: Sequence[str], channel: str) -> dict[str, Contact]:
        """Each listed user's contact on ``channel`` (users without one are absent)."""
        ...

    async def list_contacts(self, user_id: str) -> list[Contact]:
        """Every contact point of one user, by channel."""
        ...

    async def add_suppression(
        self,
        channel: str,
        address: str,
        reason: SuppressionReason,
        now: datetime,
        source: str | None = None,
    ) -> bool:
        """Suppress ``address`` on ``channel``; True if it was not suppressed before.
        An existing suppression keeps its ``added_at`` and its reason, except that a
        stronger reason replaces a weaker one (``tepat.domain.contacts.overrides``:
        complaint > hard_bounce > the rest), with its ``source``. Concurrent adds of one
        address make one suppression and exactly one of them gets True."""
        ...

    async def lift_suppression(
        self, channel: str, address: str, reason: SuppressionReason | None = None
    ) -> bool:
        """Remove the suppression; True if there was one. With ``reason``, only a
        suppression for that reason is lifted (a START reply lifts a STOP, not a hard
        bounce)."""
        ...

    async def suppressions_for(
        self, channel: str, addresses: Sequence[str]
    ) -> dict[str, Suppression]:
        """The suppressions among ``addresses`` on ``channel``, by address."""
        ...

    async def list_suppressions(
        self, channel: str | None, after: tuple[str, str] | None, limit: int
    ) -> list[Suppression]:
        """Suppressions (of one channel when given) by (channel, address), those after
        the key ``after`` = (channel, address) only: a keyset page of at most ``limit``."""
        ...

    async def record_provider_event(self, provider: str, event_id: str, now: datetime) -> bool:
        """True the first time (``provider``, ``event_id``) is recorded, False ever
        after (a unique key, not a read before the write): two processes handed the
        same callback at once learn which one recorded it. Recorded only once the
        event was acted on (``tepat.services.provider_events``)."""
        ...

    async def provider_event_seen(self, provider: str, event_id: str) -> bool:
        """Whether (``provider``, ``event_id``) was recorded: a callback already acted
        on and recorded is not acted on again."""
        ...


class WebhookStore(Protocol):
    """Status webhook subscriptions and the journal of status changes waiting to become
    webhooks (``tepat/domain/webhooks.py``).

    The journal is written in the same write as the status change it records: a
    message's move to ``sent``, ``delivered``, ``failed``, ``skipped`` or ``missed`` (by
    any write: a transition or an insert in that status) and an inbox item's first read,
    except for webhook delivery messages themselves (user ``~webhook``), and only while a
    subscription is enabled (SQLite: at once; MongoDB: seen within seconds in other
    processes, since each process caches whether one exists)."""

    async def create_webhook_subscription(self, sub: WebhookSubscription) -> bool:
        """Store a new subscription; False (nothing changed) if its id exists."""
        ...

    async def get_webhook_subscription(
        self, subscription_id: str
    ) -> WebhookSubscription | None: ...

    async def list_webhook_subscriptions(self) -> list[WebhookSubscription]:
        """Every subscription, enabled or not, by creation time then id."""
        ...

    async def update_webhook_subscription(
        self, sub: WebhookSubscription, expect_version: int
    ) -> bool:
        """Compare-and-set: replace the stored subscription (url, event types, categories,
        secrets, enabled, reason, version: all of ``sub``) only if its version is still
        ``expect_version``. Returns whether it did."""
        ...

    async def delete_webhook_subscription(self, subscription_id: str) -> bool: ...

    async def webhook_journal(self, limit: int) -> list[StatusChangeEntry]:
        """Up to ``limit`` journal entries, oldest first where the store knows the order."""
        ...

    async def drop_webhook_journal(self, entries: Sequence[StatusChangeEntry]) -> int:
        """Remove these entries (by ``key``) once turned into deliveries; returns how many."""
        ...


class Store(
    UserStore,
    DeviceStore,
    ReminderStore,
    ImportStore,
    PreferenceStore,
    MessageStore,
    TicketStore,
    OpsViewStore,
    PresenceStore,
    TemplateStore,
    InboxStore,
    EventStore,
    ContactStore,
    WebhookStore,
    Protocol,
):
    async def open(self) -> None:
        """Connect, create or migrate the schema and indexes (idempotent)."""
        ...

    async def close(self) -> None: ...

    async def ping(self) -> None:
        """Raise if the store cannot be reached."""
        ...

    async def get_meta(self, key: str) -> str | None: ...

    async def set_meta(self, key: str, value: str) -> None: ...
