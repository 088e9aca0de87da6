"""Importing many whole users at once: user, devices and reminders per item.

The same rules as the single use cases in :mod:`tepat.services.accounts`, but the store is
read a request at a time, written in one batch per kind (one transaction where it can),
and the users the import creates are planned together in one pass; an existing user
whose plan changed is re-planned by the creator, which reconciles.

A bad field fails its own item (``items[3].reminders[0].local_time``), never the others.
What is unchanged is not written, so repeating an import changes nothing.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Final, Literal, Protocol

from tepat.domain.errors import DomainError
from tepat.domain.models import Device, Message, QuietHours, Reminder, User
from tepat.domain.planning import plan_user, planning_fingerprint
from tepat.domain.validation import check_identifier, parse_quiet_hours
from tepat.domain.zones import load_zone
from tepat.ports.repositories.bulk_import import BulkImportRepository, NewUsersPlan
from tepat.ports.repositories.users import PlanMark, PlanTarget
from tepat.services.accounts import (
    KEEP,
    AccountParts,
    AccountRecords,
    ReminderItem,
    _Keep,
    checked_device,
    checked_reminder,
    merged_user,
    plan_changed,
    revised_reminder,
)
from tepat.services.planning.creator import plan_mark

#: Items per request: bounds one request's memory, write transaction and planning pass.
MAX_ITEMS: Final = 1000
# Re-plans of changed existing users running at once (each is a few store round trips).
REPLAN_CONCURRENCY: Final = 8

Status = Literal["created", "updated", "unchanged", "error"]


@dataclass(frozen=True, slots=True)
class DeviceItem:
    device_id: str
    push_token: str
    platform: str | None = None
    kind: str = "expo"


@dataclass(frozen=True, slots=True)
class QuietHoursItem:
    start: str
    end: str


@dataclass(frozen=True, slots=True)
class UserItem:
    """One whole user; ``KEEP`` leaves a stored field as it is (defaults on create)."""

    user_id: str
    timezone: str
    locale: str | _Keep = KEEP
    quiet_hours: QuietHoursItem | _Keep | None = KEEP
    enabled: bool | _Keep = KEEP
    devices: Sequence[DeviceItem] = ()
    reminders: Sequence[ReminderItem] = ()


@dataclass(frozen=True, slots=True)
class FieldProblem:
    field: str  # in full: "items[3].reminders[0].local_time"
    message: str


@dataclass(frozen=True, slots=True)
class ItemResult:
    index: int
    user_id: str | None
    status: Status
    errors: list[FieldProblem] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class InvalidItem:
    """An item the caller could not even read (bad JSON line, wrong shape)."""

    user_id: str | None
    errors: list[FieldProblem]


def item_field(index: int, path: Sequence[int | str] = ()) -> str:
    """``(3, ("reminders", 0, "local_time"))`` -> ``items[3].reminders[0].local_time``."""
    out = f"items[{index}]"
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else f".{part}"
    return out


@dataclass(slots=True)
class _Valid:
    index: int
    item: UserItem
    quiet_hours: QuietHours | _Keep | None
    devices: list[Device]
    reminders: list[Reminder]


class ImportRecords(AccountRecords, BulkImportRepository, Protocol): ...


class ImportParts(AccountParts, Protocol):
    """What an import is given: an account use case's parts, with bulk writes."""

    @property
    def store(self) -> ImportRecords: ...


async def import_users(
    rt: ImportParts, items: Sequence[UserItem | InvalidItem]
) -> list[ItemResult]:
    """Create or update each item's user, devices and reminders; one result per item, in order."""
    if len(items) > MAX_ITEMS:
        raise ValueError(f"at most {MAX_ITEMS} items per request")
    now = rt.clock.now()
    results: dict[int, ItemResult] = {}
    valid: list[_Valid] = []
    seen_users: dict[str, int] = {}
    seen_tokens: dict[str, str] = {}
    for index, item in enumerate(items):
        if isinstance(item, InvalidItem):
            results[index] = ItemResult(index, item.user_id, "error", item.errors)
            continue
        try:
            checked = _check(rt, index, item, now, seen_users, seen_tokens)
        except DomainError as e:
            problem = FieldProblem(e.field, e.message)
            results[index] = ItemResult(index, item.user_id, "error", [problem])
            continue
        seen_users[item.user_id] = index
        for d in checked.devices:
            seen_tokens.setdefault(d.push_token, item_field(index))
        valid.append(checked)

    if valid:
        statuses = await _apply(rt, valid, now)
        for v in valid:
            results[v.index] = ItemResult(v.index, v.item.user_id, statuses[v.index])
    return [results[i] for i in range(len(items))]


def _check(
    rt: ImportParts,
    index: int,
    item: UserItem,
    now: datetime,
    seen_users: Mapping[str, int],
    seen_tokens: Mapping[str, str],
) -> _Valid:
    """The single endpoints' checks, with each field named from the request's root."""
    path: tuple[int | str, ...] = ()  # where in the item the check below is
    try:
        check_identifier(item.user_id, "user_id")
        load_zone(item.timezone, "timezone")
        if item.user_id in seen_users:
            also = item_field(seen_users[item.user_id])
            raise DomainError("user_id", f"appears twice in this request (also {also})")
        quiet: QuietHours | _Keep | None = KEEP
        if not isinstance(item.quiet_hours, _Keep):
            qh = item.quiet_hours
            quiet = parse_quiet_hours(qh.start, qh.end) if qh is not None else None

        devices: list[Device] = []
        for j, d in enumerate(item.devices):
            path = ("devices", j)
            device = checked_device(
                item.user_id, d.device_id, d.push_token, d.platform, now, d.kind, rt.push_kinds
            )
            token = device.push_token
            if any(x.device_id == device.device_id for x in devices):
                raise DomainError("device_id", "appears twice in this user")
            if token in seen_tokens or any(x.push_token == token for x in devices):
                other = seen_tokens.get(token, item_field(index))
                raise DomainError(
                    "push_token",
                    f"given to another device in this request (in {other}); "
                    "a token is bound to one device",
                )
            devices.append(device)

        reminders: list[Reminder] = []
        reminder_ids: set[str] = set()
        for j, r in enumerate(item.reminders):
            path = ("reminders", j)
            reminder = checked_reminder(rt.categories, item.user_id, r, now)
            if reminder.reminder_id in reminder_ids:
                raise DomainError("reminder_id", "appears twice in this user")
            reminder_ids.add(reminder.reminder_id)
            reminders.append(reminder)
    except DomainError as e:
        raise DomainError(item_field(index, (*path, *e.field.split("."))), e.message) from None
    return _Valid(index, item, quiet, devices, reminders)


@dataclass(slots=True)
class _Writes:
    """What an import must write: only what differs from the store."""

    users: list[User] = field(default_factory=list)
    user_items: list[int] = field(default_factory=list)  # the item index of each user
    devices: list[Device] = field(default_factory=list)
    reminders: list[Reminder] = field(default_factory=list)
    replan: set[str] = field(default_factory=set)  # existing users whose plan changed
    statuses: dict[int, Status] = field(default_factory=dict)


async def _apply(rt: ImportParts, valid: Sequence[_Valid], now: datetime) -> dict[int, Status]:
    store = rt.store
    ids = [v.item.user_id for v in valid]
    old_users = await store.get_users(ids)
    # A user not stored yet has nothing else stored either (the common case of an import).
    known = [uid for uid in ids if uid in old_users]
    old_reminders = await store.reminders_for_users(known) if known else {}
    old_devices = await store.active_devices(known) if known else {}
    w = _Writes()
    for v in valid:
        _diff(v, old_users, old_reminders, old_devices, now, w)

    # One batch per kind in one transaction, with the plan of the users not yet stored.
    presumed_new = [u for u in w.users if u.user_id not in old_users]
    plans: list[NewUsersPlan] = []

    def plan() -> NewUsersPlan:
        plans.append(_plan_presumed_new(rt, presumed_new, w, now))
        return plans[0]

    written = await store.write_records(w.users, w.devices, w.reminders, plan)

    new_users: list[str] = []
    for user, index, created in zip(w.users, w.user_items, written.created, strict=True):
        if user.user_id in old_users:
            continue
        if created:
            new_users.append(user.user_id)
        else:
            # Another import created this user between our read and our write: its
            # plan may differ from ours, so reconcile like any change.
            w.replan.add(user.user_id)
            w.statuses[index] = "updated"
    if not written.planned:
        await _plan_new_users(rt, new_users, w.reminders, written.stamps, now)
    elif plans[0].messages:
        await rt.outbox.flush_quietly()
    await _replan(rt, sorted(w.replan))
    return w.statuses


def _diff(
    v: _Valid,
    old_users: Mapping[str, User],
    old_reminders: Mapping[str, list[Reminder]],
    old_devices: Mapping[str, list[Device]],
    now: datetime,
    w: _Writes,
) -> None:
    """Add to ``w`` what item ``v`` changes, by the single use cases' rules."""
    item, old = v.item, old_users.get(v.item.user_id)
    user = merged_user(
        old, item.user_id, item.timezone, item.locale, v.quiet_hours, item.enabled, now
    )
    changed = old is None or _user_fields(old) != _user_fields(user)
    if changed:
        w.users.append(user)
        w.user_items.append(v.index)
    if old is not None and plan_changed(old, user):
        w.replan.add(user.user_id)

    stored = {r.reminder_id: r for r in old_reminders.get(item.user_id, [])}
    for r in v.reminders:
        prior = stored.get(r.reminder_id)
        revised = revised_reminder(prior, r)
        if revised is None:
            continue
        if prior is not None:
            w.replan.add(user.user_id)
        w.reminders.append(revised)
        changed = True

    active = {d.device_id: d for d in old_devices.get(item.user_id, [])}
    for d in v.devices:
        prior_d = active.get(d.device_id)
        if prior_d is not None and _device_fields(prior_d) == _device_fields(d):
            continue  # already this device's active binding
        w.devices.append(d)
        changed = True
    w.statuses[v.index] = "created" if old is None else "updated" if changed else "unchanged"


def _user_fields(u: User) -> tuple[object, ...]:
    return (u.timezone, u.locale, u.quiet_hours, u.enabled)


def _device_fields(d: Device) -> tuple[object, ...]:
    return (d.push_token, d.platform, d.kind)


def _plan_presumed_new(
    rt: ImportParts, users: Sequence[User], w: _Writes, now: datetime
) -> NewUsersPlan:
    """The horizon's messages and marks of ``users``, stored nowhere yet: planned from
    exactly the reminders this import writes, as a stored user with no mark would be."""
    reminders: dict[str, list[Reminder]] = {u.user_id: [] for u in users}
    for r in w.reminders:
        if r.user_id in reminders:
            reminders[r.user_id].append(r)
    categories, end = rt.categories, now + rt.creator.horizon
    fingerprint = planning_fingerprint(categories)
    messages: list[Message] = []
    marks: list[PlanMark] = []
    for user in users:
        own = sorted(reminders[user.user_id], key=lambda r: r.reminder_id)
        messages.extend(plan_user(user, own, categories, now, end, now))
        # Stamp 0 stands in: the store marks the users it creates, in that transaction.
        target = PlanTarget(user, 0, None)
        marks.append(plan_mark(target, own, categories, now, end, fingerprint, now))
    return NewUsersPlan(messages, marks)


async def _plan_new_users(
    rt: ImportParts,
    user_ids: Sequence[str],
    written: Sequence[Reminder],
    stamps: Mapping[str, int],
    now: datetime,
) -> None:
    """One planning pass over the creator's horizon for every user this import created,
    leaving each a planning mark, as :meth:`Creator.replan_user` does.

    A new user has no pending message: nothing to reconcile, one batched insert. The users
    (with their change stamps) are read before their reminders, so a mark planned from
    reminders older than a later change is refused (compare-and-set). A user whose stamp
    is still the one the import's write left has exactly the reminders it wrote: those
    are planned without reading them back.
    """
    if not user_ids:
        return
    store, categories = rt.store, rt.categories
    targets = await store.get_plan_targets(user_ids)
    unchanged = {uid for uid, t in targets.items() if stamps.get(uid) == t.stamp}
    reminders: dict[str, list[Reminder]] = {uid: [] for uid in unchanged}
    for r in written:
        if r.user_id in unchanged:
            reminders[r.user_id].append(r)
    for rs in reminders.values():
        rs.sort(key=lambda r: r.reminder_id)  # the order the store reads them in
    changed = [uid for uid in targets if uid not in unchanged]
    if changed:
        reminders.update(await store.reminders_for_users(changed))
    end = now + rt.creator.horizon
    planned = [
        m
        for uid, t in targets.items()
        for m in plan_user(t.user, reminders.get(uid, []), categories, now, end, now)
    ]
    if planned:
        await store.insert_messages(planned)
    fingerprint = planning_fingerprint(categories)
    marks = [
        plan_mark(t, reminders.get(uid, []), categories, now, end, fingerprint, now)
        for uid, t in targets.items()
        if t.mark is None  # a concurrent import's standing mark already covers it
    ]
    # Only once the messages are written: a crash before leaves no mark.
    await store.set_plan_marks(marks)
    if planned:
        await rt.outbox.flush_quietly()


async def _replan(rt: ImportParts, user_ids: Sequence[str]) -> None:
    gate = asyncio.Semaphore(REPLAN_CONCURRENCY)

    async def one(user_id: str) -> None:
        async with gate:
            await rt.creator.replan_user(user_id)

    await asyncio.gather(*(one(u) for u in user_ids))
