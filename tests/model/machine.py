"""The state machine: random sequences of what apps, users, time and faults do to Tepat.

Every rule makes the same call on the real system (over the HTTP API) and on
the reference model, compares the answer's status, lets the consumers take
what became due, and the invariant then compares everything observable.
"""

from __future__ import annotations

import asyncio
import math
import uuid
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from datetime import date, datetime, time, timedelta
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import quote

import httpx
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from tepat.sandbox.expo import ExpoSandbox
from tests.model.census import Census
from tests.model.checks import SETTLED, Checker
from tests.model.faults import Fault
from tests.model.reference import (
    CONTACT_CHANNELS,
    EVENT_TYPES,
    EventRequest,
    Model,
    OneOffRequest,
    Quiet,
    ReminderState,
    offset_transitions,
    wall,
)
from tests.model.system import OCCURRED_AT, System

T = TypeVar("T")

USERS = ("ana", "bob")  # two: enough to share device ids and tokens, dense enough to interact
# Zones with the offsets and changes that catch planners out: DST north and south, a
# 30-minute change (Lord Howe), 45-minute offsets (Chatham), half-hour ones (St John's,
# Kolkata, Tehran), changes at midnight (Santiago, Havana), and Casablanca, whose 2027
# differs by an hour between the system's tz database and the tzdata package.
ZONES = (
    "America/New_York",
    "Europe/London",
    "Australia/Lord_Howe",
    "Asia/Kolkata",
    "America/Santiago",
    "America/Havana",
    "Pacific/Chatham",
    "America/St_Johns",
    "Europe/Chisinau",
    "Africa/Casablanca",
    "Asia/Tehran",
)
QUIETS: tuple[Quiet | None, ...] = (
    None,
    Quiet(time(22, 0), time(7, 0)),
    Quiet(time(1, 0), time(3, 0)),
    Quiet(time(2, 0), time(2, 30)),
    Quiet(time(12, 0), time(12, 45)),
)
TIMES = tuple(
    time(h, m) for h, m in ((0, 30), (1, 30), (2, 0), (2, 30), (3, 0), (7, 0), (9, 0), (12, 30))
)
REMINDERS = ("r1", "r2", "r3", "r4", "r5")
CATEGORIES = ("meal", "mood", "safety")
DEVICES = ("phone", "tablet")
TOKENS = tuple(f"ExponentPushToken[tok{i}]" for i in range(4))
KEYS = ("k1", "k2", "k3")
SEND_AT_MINUTES = (None, 0, 1, 7, 30, 60, 120)
# Reminder times and quiet hours also come relative to the user's local now (in minutes),
# so that what a sequence sets up happens within the hours it simulates.
SOON = (None, 1, 5, 20, 60)
QUIET_SOON = (None, (-10, 20), (5, 35), (-30, 30))
STEP_MINUTES = (30, 45, 60, 90, 180, 360)
EVENT_IDS = ("ev1", "ev2", "ev3")
# Listed recipients ("cy" never becomes a user: an unknown id), or None: all_users.
EVENT_RECIPIENTS: tuple[tuple[str, ...] | None, ...] = (
    ("ana",),
    ("bob",),
    ("ana", "bob"),
    ("bob", "cy", "ana"),
    None,
)
EVENT_SEND_AT = (None, None, 0, 2, 30, 90)  # minutes ahead
EVENT_PRIORITIES = (None, None, "critical", "bulk")
# Armed with a posted event, so they most likely meet its sends.
EVENT_FAULTS = (
    Fault.CHANNEL_TRY_AGAIN,
    Fault.CHANNEL_MAYBE_SENT,
    Fault.CHANNEL_REFUSED,
    Fault.CHANNEL_CRASH_AFTER_SEND,
    Fault.CRASH_AFTER_CLAIM,
    Fault.CRASH_BEFORE_RECORD,
    Fault.CRASH_FANOUT_BEFORE_CURSOR,
)
ADDRESSES = {
    "email": ("ana@example.com", "bob@example.com", "shared@example.com"),
    "sms": ("+442071838750", "+14155552671"),
}
# Every 2027 instant at which a zone used here changes its offset, and the zones that
# do: a sequence starts a little before one, and its first users live there.
TRANSITION_ZONES: dict[datetime, tuple[str, ...]] = {}
for _tz in ZONES:
    for _at in offset_transitions(_tz, 2027):
        TRANSITION_ZONES[_at] = (*TRANSITION_ZONES.get(_at, ()), _tz)
TRANSITIONS = tuple(sorted(TRANSITION_ZONES))
# Minutes from the wall-clock reading at which a zone's offset changes: local times in
# a spring-forward gap, in a fall-back's repeated hour, and at their edges.
AROUND_CHANGE = (-60, -30, -1, 0, 15, 30, 59)
ROUTINE_SOON = (1, 5, 20, 60, 120, 240)  # minutes ahead, local


@dataclass
class Env:
    store_name: str
    tmp: Path
    sandbox: ExpoSandbox
    sandbox_url: str
    census: Census = field(default_factory=Census)  # over every example of the run


class TepatMachine(RuleBasedStateMachine):
    def __init__(self, env: Env) -> None:
        super().__init__()
        self.env = env
        self.loop = asyncio.new_event_loop()
        self.system: System | None = None
        self.model: Model | None = None
        self.checker = Checker()
        self.bursts = 0
        self.failed = False  # then teardown only cleans up
        self.examples_dir = env.tmp / uuid.uuid4().hex  # a fresh store per example
        self.home: tuple[str, ...] = ZONES[:1]

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        try:
            return self.loop.run_until_complete(coro)
        except BaseException:
            self.failed = True
            raise

    @property
    def sut(self) -> System:
        assert self.system is not None
        return self.system

    @property
    def ref(self) -> Model:
        assert self.model is not None
        return self.model

    @initialize(
        transition=st.sampled_from(TRANSITIONS),
        hours_before=st.integers(min_value=0, max_value=30),
        populate=st.booleans(),
        routines=st.sampled_from((0, 1, 2, 2, 2)),
        data=st.data(),
    )
    def start(
        self,
        transition: datetime,
        hours_before: int,
        populate: bool = False,
        routines: int = 0,
        data: st.DataObject | None = None,
    ) -> None:
        start = transition - timedelta(hours=hours_before, minutes=7)
        # The zones whose clocks change at ``transition``: where routines live first.
        self.home = TRANSITION_ZONES.get(transition, ZONES[:1])
        self.examples_dir.mkdir(parents=True, exist_ok=True)
        self.system = System(
            self.env.store_name, self.examples_dir, self.env.sandbox, self.env.sandbox_url, start
        )
        self.model = Model(start)
        self.run(self.system.start())
        if populate:
            self._populate()
        if data is not None:
            for user in USERS[:routines]:
                zones = self.home if user == USERS[0] else ZONES
                tz = data.draw(st.sampled_from(zones), label=f"{user}'s zone")
                self.put_routine(user, tz, data.draw(st.integers(3, len(REMINDERS))), data)

    def _populate(self) -> None:
        """Half the sequences begin with both users, ana with a phone, and contact points
        (ana both, bob e-mail only): what events, reminders and one-offs need to reach
        anyone, so more of the steps that follow exercise delivery."""
        for user, tz in (("ana", ZONES[0]), ("bob", ZONES[1])):
            self.put_user(user, tz, None, None, False, None, False)
        self.register_device("ana", DEVICES[0], TOKENS[0], False)
        self.set_contact("ana", "email", 0)
        self.set_contact("ana", "sms", 0)
        self.set_contact("bob", "email", 1)

    def teardown(self) -> None:
        try:
            if self.system is not None and self.model is not None and not self.failed:
                # Past every window and lease, with the sweeper running: then nothing may be
                # pending or sending, and every arrival the model demands has happened.
                self._fan_out_all()
                target = self.sut.clock.now() + SETTLED + timedelta(minutes=5)
                self.run(self.sut.advance_to(target))
                self.ref.advance(self.sut.clock.now())
                self.run(self.checker.step(self.ref, self.sut, final=True))
                self.env.census.take(self.ref)
        finally:
            try:
                if self.system is not None:
                    self.run(self.system.close())
            finally:
                self.loop.close()

    # ------------------------------------------------------------ helpers

    def _call(
        self,
        what: str,
        expected: int | set[int],
        request: Callable[[], Awaitable[httpx.Response]],
        twice: bool = False,
    ) -> None:
        async def go() -> list[httpx.Response]:
            if twice:
                return list(await asyncio.gather(request(), request()))
            return [await request()]

        responses = self.run(go())
        allowed = {expected} if isinstance(expected, int) else expected
        if twice and allowed & {200, 201}:
            allowed = allowed | {200, 201}
        for r in responses:
            if r.status_code not in allowed:
                self.failed = True
                raise AssertionError(
                    f"{what}: the API answered {r.status_code} {r.text[:300]}, "
                    f"the model says {sorted(allowed)}"
                )
        self._now()

    def _local_soon(self, tz: str, minutes: int) -> time:
        local = wall(self.sut.clock.now() + timedelta(minutes=minutes), tz)
        return local.time().replace(second=0, microsecond=0)

    def _now(self) -> None:
        """The consumers take what became due at this instant."""
        self.run(self.sut.pump())
        self.ref.advance(self.sut.clock.now())

    # ------------------------------------------------------------ users

    @rule(
        user=st.sampled_from(USERS),
        tz=st.sampled_from(ZONES),
        quiet=st.sampled_from(QUIETS),
        soon=st.sampled_from(QUIET_SOON),
        set_quiet=st.booleans(),
        enabled=st.sampled_from((None, None, True, False)),
        twice=st.sampled_from((False, False, False, True)),
    )
    def put_user(
        self,
        user: str,
        tz: str,
        quiet: Quiet | None,
        soon: tuple[int, int] | None,
        set_quiet: bool,
        enabled: bool | None,
        twice: bool,
    ) -> None:
        if soon is not None:
            quiet = Quiet(self._local_soon(tz, soon[0]), self._local_soon(tz, soon[1]))
        body: dict[str, Any] = {"timezone": tz}
        if set_quiet:
            body["quiet_hours"] = (
                {"start": f"{quiet.start:%H:%M}", "end": f"{quiet.end:%H:%M}"} if quiet else None
            )
        if enabled is not None:
            body["enabled"] = enabled
        expected = self.ref.put_user(user, tz, quiet, set_quiet, enabled)
        self._call(
            f"PUT user {user} {body}",
            expected,
            lambda: self.sut.http.put(f"/v1/users/{user}", json=body),
            twice,
        )

    # ------------------------------------------------------------ reminders

    @rule(
        user=st.sampled_from(USERS),
        rid=st.sampled_from(REMINDERS),
        category=st.sampled_from(CATEGORIES),
        at=st.sampled_from(TIMES),
        soon=st.sampled_from(SOON),
        variant=st.integers(0, 1),
        enabled=st.sampled_from((True, True, True, False)),
        twice=st.sampled_from((False, False, False, True)),
    )
    def put_reminder(
        self,
        user: str,
        rid: str,
        category: str,
        at: time,
        soon: int | None,
        variant: int,
        enabled: bool,
        twice: bool,
    ) -> None:
        if soon is not None and user in self.ref.users:
            at = self._local_soon(self.ref.users[user].tz, soon)
        state = ReminderState(category, at, f"{rid} body {variant}", enabled)
        expected = self.ref.put_reminder(user, rid, state)
        body = {
            "category": category,
            "local_time": f"{at:%H:%M}",
            "title": f"{rid} title",
            "body": state.body,
            "enabled": enabled,
        }
        self._call(
            f"PUT reminder {user}/{rid} {body}",
            expected,
            lambda: self.sut.http.put(f"/v1/users/{user}/reminders/{rid}", json=body),
            twice,
        )

    @rule(user=st.sampled_from(USERS), rid=st.sampled_from(REMINDERS))
    def delete_reminder(self, user: str, rid: str) -> None:
        expected = self.ref.delete_reminder(user, rid)
        self._call(
            f"DELETE reminder {user}/{rid}",
            expected,
            lambda: self.sut.http.delete(f"/v1/users/{user}/reminders/{rid}"),
        )

    @precondition(lambda self: self.model is not None and bool(self.model.reminders))
    @rule(data=st.data(), at=st.sampled_from(TIMES))
    def delete_then_recreate(self, data: st.DataObject, at: time) -> None:
        user, rid = data.draw(st.sampled_from(sorted(self.ref.reminders)))
        old = self.ref.reminders[(user, rid)]
        self.delete_reminder(user, rid)
        self.put_reminder(user, rid, old.category, at, None, 0, True, False)

    # ------------------------------------------------------------ daily reminders
    # The core of the product: a day of reminders per user, in zones whose clocks change
    # while the sequence runs, edited, moved, quietened and deleted as it goes.

    def _local_times(self, tz: str) -> list[time]:
        """Local times worth a reminder in ``tz`` now: around the zone's next offset change
        (in its gap or its repeated hour, at their edges), soon, and the usual ones."""
        now = self.sut.clock.now()
        out = [self._local_soon(tz, m) for m in ROUTINE_SOON]
        changes = [t for t in TRANSITIONS if now < t <= now + timedelta(days=2)]
        for change in changes:
            if tz in TRANSITION_ZONES[change]:
                # The reading at which the clocks change (02:00 in New York in spring).
                reading = wall(change - timedelta(minutes=1), tz) + timedelta(minutes=1)
                out += [(reading + timedelta(minutes=m)).time() for m in AROUND_CHANGE]
        return out + list(TIMES)

    def _zones(self) -> tuple[str, ...]:
        """Every zone, the ones changing their clocks during the sequence most often."""
        return self.home * 4 + ZONES

    def _next_change(self) -> datetime | None:
        """The next instant at which the clocks of a home zone change, within 30 hours."""
        now = self.sut.clock.now()
        ahead = [
            t
            for t in TRANSITIONS
            if now < t <= now + timedelta(hours=30) and set(TRANSITION_ZONES[t]) & set(self.home)
        ]
        return min(ahead, default=None)

    @precondition(lambda self: self.model is not None and bool(self.model.reminders))
    @rule(minutes=st.sampled_from((-61, -30, -1, 0, 1, 30, 59, 61, 90)))
    def advance_across_change(self, minutes: int) -> None:
        """Time passes to ``minutes`` from the next change of the clocks (or a few hours,
        with none ahead): the reminders around it fire in its gap or repeated hour."""
        change = self._next_change()
        now = self.sut.clock.now()
        target = now + timedelta(hours=3) if change is None else change + timedelta(minutes=minutes)
        self.advance(max(1, math.ceil((target - now).total_seconds() / 60)))

    @rule(
        user=st.sampled_from(USERS),
        data=st.data(),
        count=st.integers(3, len(REMINDERS)),
    )
    def routine(self, user: str, data: st.DataObject, count: int) -> None:
        tz = data.draw(st.sampled_from(self._zones()), label="tz")
        self.put_routine(user, tz, count, data)

    def put_routine(self, user: str, tz: str, count: int, data: st.DataObject) -> None:
        """The user (created, or moved to ``tz``) with ``count`` daily reminders, and
        mostly a device of their own to receive them."""
        known = self.ref.users.get(user)
        if known is None or known.tz != tz:
            self.put_user(user, tz, None, None, False, None, False)
        if not self.ref.active_tokens(user) and data.draw(st.sampled_from((True, True, False))):
            self.register_device(user, DEVICES[1], TOKENS[2 + USERS.index(user)], False)
        times = self._local_times(tz)
        for rid in REMINDERS[:count]:
            at = data.draw(st.sampled_from(times), label=f"{rid} at")
            category = data.draw(st.sampled_from(CATEGORIES), label=f"{rid} category")
            self.put_reminder(user, rid, category, at, None, 0, True, False)

    def _draw_reminder(self, data: st.DataObject) -> tuple[str, str]:
        return data.draw(st.sampled_from(sorted(self.ref.reminders)), label="reminder")

    @precondition(lambda self: self.model is not None and bool(self.model.reminders))
    @rule(
        data=st.data(),
        variant=st.integers(0, 1),
        enabled=st.sampled_from((True,) * 5 + (False,)),
    )
    def edit_reminder(self, data: st.DataObject, variant: int, enabled: bool) -> None:
        """A new local time (near a change, soon, or usual), maybe a new text or category."""
        user, rid = self._draw_reminder(data)
        old = self.ref.reminders[(user, rid)]
        at = data.draw(st.sampled_from(self._local_times(self.ref.users[user].tz)), label="at")
        category = data.draw(st.sampled_from((old.category, *CATEGORIES)), label="category")
        self.put_reminder(user, rid, category, at, None, variant, enabled, False)

    @precondition(lambda self: self.model is not None and bool(self.model.reminders))
    @rule(data=st.data(), keep_quiet=st.booleans())
    def move_zone(self, data: st.DataObject, keep_quiet: bool) -> None:
        """A user with reminders travels: their local times now fall elsewhere."""
        user, _ = self._draw_reminder(data)
        tz = data.draw(st.sampled_from(self._zones()), label="tz")
        self.put_user(user, tz, None, None, not keep_quiet, None, False)

    @precondition(lambda self: self.model is not None and bool(self.model.reminders))
    @rule(
        data=st.data(),
        around=st.sampled_from(((10, 20), (0, 30), (60, 1), (-5, 60), (30, 0))),
    )
    def quiet_over_reminder(self, data: st.DataObject, around: tuple[int, int]) -> None:
        """Quiet hours from ``around[0]`` minutes before a reminder's local time to
        ``around[1]`` after it (an empty period is refused)."""
        user, rid = self._draw_reminder(data)
        at = datetime.combine(date(2027, 1, 1), self.ref.reminders[(user, rid)].at)
        quiet = Quiet(
            (at - timedelta(minutes=around[0])).time(), (at + timedelta(minutes=around[1])).time()
        )
        self.put_user(user, self.ref.users[user].tz, quiet, None, True, None, False)

    @precondition(lambda self: self.model is not None and bool(self.model.reminders))
    @rule(data=st.data())
    def delete_existing_reminder(self, data: st.DataObject) -> None:
        self.delete_reminder(*self._draw_reminder(data))

    @precondition(lambda self: self.model is not None and bool(self.model.reminders))
    @rule(after=st.sampled_from((0, 0, 1, 10, 45)), count=st.integers(1, 4))
    def advance_to_reminder(self, after: int, count: int) -> None:
        """Time passes to the next reminder's instant (and ``after`` minutes more),
        ``count`` times."""
        for _ in range(count):
            nxt = self.ref.next_reminder_instant(timedelta(hours=12))
            if nxt is None:
                # None due (all disabled, or far ahead): days of ticks would cost more
                # than they test.
                self.advance(180)
                return
            seconds = (nxt - self.sut.clock.now()).total_seconds()
            self.advance(max(1, math.ceil(seconds / 60)) + after)
            self.everything_agrees()

    @rule(crash=st.sampled_from((False, False, True)))
    def plan_now(self, crash: bool) -> None:
        """A plan run now, off the ten-minute tick (a scheduler starting); it may die
        before its marks."""
        if crash:
            self.sut.faults.armed.add(Fault.CRASH_PLAN_BEFORE_MARKS)
        self.run(self.sut.plan_run())
        self._now()

    # ------------------------------------------------------------ devices, preferences

    @rule(
        user=st.sampled_from(USERS),
        device=st.sampled_from(DEVICES),
        token=st.sampled_from(TOKENS),
        twice=st.sampled_from((False, False, False, True)),
    )
    def register_device(self, user: str, device: str, token: str, twice: bool) -> None:
        expected = self.ref.register_device(user, device, token)
        self._call(
            f"PUT device {user}/{device} {token}",
            expected,
            lambda: self.sut.http.put(
                f"/v1/users/{user}/devices/{device}", json={"push_token": token}
            ),
            twice,
        )

    @rule(user=st.sampled_from(USERS), device=st.sampled_from(DEVICES))
    def deactivate_device(self, user: str, device: str) -> None:
        expected = self.ref.deactivate_device(user, device)
        self._call(
            f"DELETE device {user}/{device}",
            expected,
            lambda: self.sut.http.delete(f"/v1/users/{user}/devices/{device}"),
        )

    @rule(user=st.sampled_from(USERS), category=st.sampled_from(CATEGORIES), on=st.booleans())
    def set_preference(self, user: str, category: str, on: bool) -> None:
        expected = self.ref.set_preference(user, category, on)
        self._call(
            f"PUT preferences {user} {category}={on}",
            expected,
            lambda: self.sut.http.put(
                f"/v1/users/{user}/preferences", json={"categories": {category: on}}
            ),
        )

    # ------------------------------------------------------------ one-offs

    def _send_at(self, minutes: int | None) -> datetime | None:
        return None if minutes is None else self.sut.clock.now() + timedelta(minutes=minutes)

    def _post_oneoff(self, user: str, key: str, request: OneOffRequest, twice: bool) -> None:
        expected = self.ref.post_oneoff(user, key, request)
        body: dict[str, Any] = {
            "idempotency_key": key,
            "category": request.category,
            "title": "one-off",
            "body": request.body,
        }
        if request.send_at is not None:
            body["send_at"] = request.send_at.isoformat()
        self._call(
            f"POST one-off {user} {body}",
            expected,
            lambda: self.sut.http.post(f"/v1/users/{user}/notifications", json=body),
            twice,
        )

    @rule(
        user=st.sampled_from(USERS),
        key=st.sampled_from(KEYS),
        category=st.sampled_from(CATEGORIES),
        minutes=st.sampled_from(SEND_AT_MINUTES),
        twice=st.sampled_from((False, False, False, True)),
    )
    def post_oneoff(
        self, user: str, key: str, category: str, minutes: int | None, twice: bool
    ) -> None:
        request = OneOffRequest(category, f"{key} for {user}", self._send_at(minutes))
        self._post_oneoff(user, key, request, twice)

    @precondition(lambda self: self.model is not None and bool(self.model.oneoffs))
    @rule(data=st.data())
    def retry_oneoff(self, data: st.DataObject) -> None:
        """The same request again (a client retry after a timeout or a 500)."""
        _, user, key = data.draw(st.sampled_from(sorted(self.ref.oneoffs)))
        self._post_oneoff(user, key, self.ref.oneoffs[("o", user, key)], False)

    @rule(
        user=st.sampled_from(USERS),
        category=st.sampled_from(CATEGORIES),
        minutes=st.sampled_from(SEND_AT_MINUTES),
        count=st.integers(2, 3),
    )
    def oneoff_burst(self, user: str, category: str, minutes: int | None, count: int) -> None:
        """Several one-offs, distinct keys, one instant, one category (two chat messages)."""
        send_at = self._send_at(minutes)
        for _ in range(count):
            self.bursts += 1
            key = f"b{self.bursts}"
            self._post_oneoff(
                user, key, OneOffRequest(category, f"{key} for {user}", send_at), False
            )

    # ------------------------------------------------------------ contacts, suppressions

    @rule(
        user=st.sampled_from(USERS),
        channel=st.sampled_from(CONTACT_CHANNELS),
        index=st.sampled_from((None, 0, 0, 1, 2)),
    )
    def set_contact(self, user: str, channel: str, index: int | None) -> None:
        options = ADDRESSES[channel]
        address = None if index is None else options[index % len(options)]
        expected = self.ref.set_contact(user, channel, address)
        path = f"/v1/users/{user}/contacts/{channel}"
        if address is None:
            self._call(f"DELETE {path}", expected, lambda: self.sut.http.delete(path))
        else:
            body = {"address": address, "verified": True}
            self._call(f"PUT {path} {body}", expected, lambda: self.sut.http.put(path, json=body))

    @rule(channel=st.sampled_from(CONTACT_CHANNELS), index=st.integers(0, 2), on=st.booleans())
    def suppress(self, channel: str, index: int, on: bool) -> None:
        options = ADDRESSES[channel]
        address = options[index % len(options)]
        expected = self.ref.suppress(channel, address, on)
        if on:
            body = {"channel": channel, "address": address, "reason": "manual"}
            self._call(
                f"POST suppression {body}",
                expected,
                lambda: self.sut.http.post("/v1/suppressions", json=body),
            )
        else:
            path = f"/v1/suppressions/{channel}/{quote(address)}"
            self._call(f"DELETE {path}", expected, lambda: self.sut.http.delete(path))

    # ------------------------------------------------------------ events

    @staticmethod
    def _event_body(request: EventRequest) -> dict[str, Any]:
        body: dict[str, Any] = {
            "event_id": request.event_id,
            "type": request.type,
            # Without the templates' variable, every message of the event is render_error.
            "data": {"what": request.text} if request.data_ok else {"other": request.text},
            "occurred_at": OCCURRED_AT,
        }
        if request.users is None:
            body["all_users"] = True
        else:
            body["user_ids"] = list(request.users)
        if request.send_at is not None:
            body["send_at"] = request.send_at.isoformat()
        if request.priority is not None:
            body["priority"] = request.priority
        return body

    def _post_event(self, request: EventRequest, twice: bool) -> None:
        expected = self.ref.post_event(request)
        body = self._event_body(request)
        self._call(
            f"POST event {body}",
            expected,
            lambda: self.sut.http.post("/v1/events", json=body),
            twice,
        )

    @rule(
        event_id=st.sampled_from(EVENT_IDS),
        etype=st.sampled_from(sorted(EVENT_TYPES)),
        users=st.sampled_from(EVENT_RECIPIENTS),
        minutes=st.sampled_from(EVENT_SEND_AT),
        priority=st.sampled_from(EVENT_PRIORITIES),
        variant=st.integers(0, 1),
        data_ok=st.sampled_from((True,) * 7 + (False,)),
        twice=st.sampled_from((False, False, False, True)),
        fault=st.sampled_from((None,) * 4 + EVENT_FAULTS),
    )
    def post_event(
        self,
        event_id: str,
        etype: str,
        users: tuple[str, ...] | None,
        minutes: int | None,
        priority: str | None,
        variant: int,
        data_ok: bool,
        twice: bool,
        fault: Fault | None = None,
    ) -> None:
        """A new event (or a reused id: the same request is a repeat, another a 409);
        ``fault`` is armed for what comes next, most likely this event's sends."""
        request = EventRequest(
            event_id, etype, users, self._send_at(minutes), priority, variant, data_ok
        )
        self._post_event(request, twice)
        if fault is not None:
            self.sut.faults.armed.add(fault)

    @precondition(lambda self: self.model is not None and bool(self.model.events))
    @rule(data=st.data(), times=st.sampled_from((1, 1, 2, 5)))
    def repeat_event(self, data: st.DataObject, times: int) -> None:
        """The same event again (a client retry), alone or several at once."""
        event_id = data.draw(st.sampled_from(sorted(self.ref.events)))
        request = self.ref.events[event_id].request
        if times == 1:
            self._post_event(request, False)
            return
        expected = self.ref.post_event(request)
        body = self._event_body(request)

        async def go() -> list[httpx.Response]:
            return list(
                await asyncio.gather(
                    *(self.sut.http.post("/v1/events", json=body) for _ in range(times))
                )
            )

        for r in self.run(go()):
            if r.status_code != expected:
                self.failed = True
                raise AssertionError(
                    f"POST event x{times} {body}: the API answered {r.status_code} "
                    f"{r.text[:300]}, the model says {expected}"
                )
        self._now()

    def _fan_out(self, event_id: str, concurrent: bool) -> bool:
        """One page of ``event_id`` on both sides; whether it was still fanning out."""
        moved = self.run(self.sut.fan_out_page(event_id, concurrent))
        if moved is None:
            return False
        self.ref.fan_out_page(event_id, moved)
        return True

    @precondition(
        lambda self: self.model is not None and any(not e.done for e in self.model.events.values())
    )
    @rule(
        data=st.data(),
        crash=st.sampled_from((False, False, True)),
        concurrent=st.sampled_from((False, False, False, True)),
    )
    def fan_out_page(self, data: st.DataObject, crash: bool, concurrent: bool) -> None:
        """The scheduler's fan-out loop does one page (and may die before its cursor)."""
        event_id = data.draw(
            st.sampled_from(sorted(k for k, e in self.ref.events.items() if not e.done))
        )
        if crash:
            self.sut.faults.armed.add(Fault.CRASH_FANOUT_BEFORE_CURSOR)
        self._fan_out(event_id, concurrent)
        self._now()

    def _fan_out_all(self) -> None:
        """The fan-out loop catches up (it runs every second in a real scheduler)."""
        for _ in range(100):
            waiting = sorted(k for k, e in self.ref.events.items() if not e.done)
            if not waiting:
                return
            for event_id in waiting:
                if not self._fan_out(event_id, False):
                    self.failed = True
                    raise AssertionError(
                        f"event {event_id} is no longer fanning out; the model says it is"
                    )
            self._now()
        self.failed = True
        raise AssertionError(f"the events never finished fanning out: {self.ref.events}")

    # ------------------------------------------------------------ time and faults

    @rule(minutes=st.sampled_from(STEP_MINUTES))
    def advance(self, minutes: int) -> None:
        self._fan_out_all()
        target = self.sut.clock.now() + timedelta(minutes=minutes)
        self.run(self.sut.advance_to(target))
        # Not ``target``: a batch whose second began by then is held until its items'
        # instants within that second, and time passes for it (see System.pump).
        self.ref.advance(self.sut.clock.now())

    @rule(minutes=st.integers(1, 20))
    def advance_a_little(self, minutes: int) -> None:
        self.advance(minutes)

    @rule(fault=st.sampled_from(list(Fault)))
    def arm_fault(self, fault: Fault) -> None:
        self.sut.faults.armed.add(fault)

    # ------------------------------------------------------------ invariants

    @invariant()
    def everything_agrees(self) -> None:
        if self.system is None or self.model is None:
            return
        self.run(self.checker.step(self.model, self.system))
