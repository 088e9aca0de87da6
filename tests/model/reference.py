"""The reference model: what Tepat must have done, computed without Tepat's code.

Pure Python over ``zoneinfo``; it imports nothing from ``tepat``. It keeps the
state the API calls describe (users, reminders, devices, preferences, one-offs)
and moves through time event by event, deciding for every intent
(``Key``: a reminder's local date, or a one-off's idempotency key) whether and
when it arrives, and at which push tokens.

The rules it encodes (issue 9 and the working design):

- A reminder fires for a local date when the clock reaches that date's local
  time in the user's zone *under the configuration in effect then*. A local
  time that does not exist (spring forward) is read with the offset before the
  gap; a repeated one (fall back) is its first occurrence.
- A local date arrives at most once, ever, whatever the edits (delete and
  recreate included).
- Quiet hours are local ``[start, end)`` (wrapping midnight when end <= start);
  a category other than ``safety`` is deferred to the end of the quiet period,
  ``safety`` bypasses them.
- Everything else is decided at send time: the user enabled, the reminder still
  there and enabled, the category opted in, quiet hours, and the user's active
  devices (it arrives at each active device's token; with none it is skipped).
- One-offs are never refused for colliding with another intent; the same key
  with the same request is the same one-off; with another request, a 409.
- A device id is scoped to its user; a token registered by another binding
  moves (the old binding ends).

Events: a page of an event's recipients (user-id order after its cursor) creates,
for each known recipient and each channel its type routes to (a route's condition
read at fan-out), one message keyed (event, user, channel), at the event's
``send_at`` or at once; a key already taken (the page done again after a crash
before the cursor moved) creates nothing. At send time every channel takes the
checks above (a critical event bypasses quiet hours); push then needs an active
device, e-mail and SMS the user's contact address, not suppressed, and the inbox
nothing more.

Where the intended behaviour is not pinned down (an edit of a reminder's time or
content, or of the user's zone, while a message is held by quiet hours; a local
date re-planned after it was skipped), the verdict is ``UNKNOWN``: it may arrive,
at most once. Those corners are listed in the report of issue 9's model test.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta
from functools import cache
from importlib.resources import files
from zoneinfo import ZoneInfo

MISSED_WINDOW = timedelta(minutes=30)
_MS = timedelta(milliseconds=1)
BYPASS_QUIET = frozenset({"safety"})
# Categories whose "maybe sent" answers are retried (a duplicate rather than a loss).
RETRY_MAYBE_SENT = frozenset({"safety"})

#: Found by the model test (issue 18, item 9), fixed in the product: a reminder message
#: planned while quiet hours covered its local time kept that placement when the quiet
#: hours were removed (tepat/domain/planning.py still_placed now re-places it). True
#: would tolerate the old behaviour (the message may arrive at the old quiet end).
STALE_QUIET_PLACEMENT_TOLERATED = False
PLAN_HORIZON = timedelta(hours=48)  # TEPAT_PLAN_HORIZON_HOURS's default

# ("r", user, reminder, "YYYY-MM-DD"), ("o", user, idempotency key) or
# ("e", user, event id, channel)
Key = tuple[str, ...]

#: Recipients per fan-out page (the harness sets the service's page size to it): one,
#: so that two users already make several pages, and a crash between them matters.
EVENT_PAGE = 1
CONTACT_CHANNELS = ("email", "sms")


@dataclass(frozen=True)
class EventType:
    """A configured event type: its category, default priority and routes, in order:
    (channel, "always" | "active_device" | "fallback")."""

    name: str
    category: str
    priority: str
    routes: tuple[tuple[str, str], ...]


EVENT_TYPES = {
    t.name: t
    for t in (
        # Every channel: SMS only for a user without an active device (the fallback).
        EventType(
            "model.notice",
            "meal",
            "normal",
            (
                ("push", "active_device"),
                ("sms", "fallback"),
                ("inbox", "always"),
                ("email", "always"),
            ),
        ),
        # Critical and safety: quiet hours bypassed, "maybe sent" retried.
        EventType(
            "model.alert",
            "safety",
            "critical",
            (("sms", "always"), ("push", "active_device"), ("email", "always")),
        ),
    )
}


def select_channels(routes: tuple[tuple[str, str], ...], has_device: bool) -> list[str]:
    chosen: list[str] = []
    for channel, when in routes:
        take = when == "always" or (when == "active_device" and has_device)
        if take or (when == "fallback" and not chosen):
            chosen.append(channel)
    return chosen


@dataclass(frozen=True)
class EventRequest:
    """``POST /v1/events`` as the model sees it; ``users`` None is ``all_users``.
    ``data_ok`` False leaves out the templates' variable: every message ``render_error``."""

    event_id: str
    type: str
    users: tuple[str, ...] | None
    send_at: datetime | None
    priority: str | None
    variant: int
    data_ok: bool = True

    @property
    def text(self) -> str:
        return f"{self.event_id} v{self.variant}"

    def same_as(self, other: EventRequest) -> bool:
        """The same request for the API: recipients as a set, the type's priority
        when none is given, ``send_at`` to the millisecond it is kept at."""

        def norm(r: EventRequest) -> tuple[object, ...]:
            send_at = r.send_at
            if send_at is not None and send_at.microsecond % 1000:
                send_at = send_at - timedelta(microseconds=send_at.microsecond % 1000) + _MS
            users = None if r.users is None else frozenset(r.users)
            priority = r.priority or EVENT_TYPES[r.type].priority
            return (r.event_id, r.type, users, send_at, priority, r.variant, r.data_ok)

        return norm(self) == norm(other)


@dataclass
class EventProgress:
    request: EventRequest
    cursor: str = ""
    done: bool = False
    recipients: int = 0
    unknown: int = 0
    not_routed: dict[str, int] = field(default_factory=dict)

    @property
    def category(self) -> str:
        return EVENT_TYPES[self.request.type].category

    @property
    def priority(self) -> str:
        return self.request.priority or EVENT_TYPES[self.request.type].priority


@cache
def _zone(name: str) -> ZoneInfo:
    # From the tzdata package, as the product reads them (the system copy is an older
    # release that differs for 2027 in several zones), whatever zoneinfo's search path.
    resource = files("tzdata.zoneinfo").joinpath(*name.split("/"))
    with resource.open("rb") as f:
        return ZoneInfo.from_file(f, key=name)


def offset_transitions(tz: str, year: int) -> list[datetime]:
    """The instants of ``year`` at which ``tz`` changes its UTC offset (to the minute)."""
    out = []
    t = datetime(year, 1, 1, tzinfo=UTC)
    step = timedelta(hours=1)
    while t.year == year:
        if t.astimezone(_zone(tz)).utcoffset() != (t + step).astimezone(_zone(tz)).utcoffset():
            lo, hi = t, t + step  # the offset changes in (lo, hi]
            while hi - lo > timedelta(minutes=1):
                mid = lo + (hi - lo) / 2
                mid = mid.replace(second=0, microsecond=0)
                if mid.astimezone(_zone(tz)).utcoffset() == lo.astimezone(_zone(tz)).utcoffset():
                    lo = mid
                else:
                    hi = mid
            out.append(hi)
        t += step
    return out


def rule_instant(day: date, at: time, tz: str, fold: int = 0) -> datetime:
    """The UTC instant at which ``tz``'s wall clock reads ``day at`` (PEP 495 fold)."""
    return datetime.combine(day, at, tzinfo=_zone(tz)).replace(fold=fold).astimezone(UTC)


def wall(instant: datetime, tz: str) -> datetime:
    return instant.astimezone(_zone(tz)).replace(tzinfo=None)


def local_time_kind(day: date, at: time, tz: str) -> str:
    """ "in a gap" (clocks spring forward over it), "repeated" (they fall back over it),
    or "" for an ordinary local time."""
    first = rule_instant(day, at, tz)
    if wall(first, tz) != datetime.combine(day, at):
        return "in a gap"
    if rule_instant(day, at, tz, fold=1) != first:
        return "repeated"
    return ""


def offset_changes_on(day: date, tz: str) -> bool:
    """Whether ``tz``'s UTC offset at the end of local ``day`` differs from its start."""
    zone = _zone(tz)
    start = datetime.combine(day, time(0), tzinfo=zone)
    end = datetime.combine(day + timedelta(days=1), time(0), tzinfo=zone)
    return start.utcoffset() != end.utcoffset()


@dataclass(frozen=True)
class Quiet:
    start: time
    end: time

    def covers(self, at: time) -> bool:
        if self.start == self.end:
            return False
        if self.start < self.end:
            return self.start <= at < self.end
        return at >= self.start or at < self.end

    def end_after(self, instant: datetime, tz: str) -> datetime:
        """The instant ending the quiet period that contains ``instant``."""
        local = wall(instant, tz)
        day = local.date()
        if self.end <= self.start and local.time() >= self.start:
            day += timedelta(days=1)
        end = rule_instant(day, self.end, tz)
        if end <= instant:  # inside the second pass of a repeated hour
            end = rule_instant(day, self.end, tz, fold=1)
        return end


class Verdict(enum.Enum):
    ARRIVE = "arrive"
    NO_ARRIVAL = "no arrival"
    UNKNOWN = "unknown"


@dataclass
class UserState:
    tz: str
    quiet: Quiet | None = None
    enabled: bool = True
    prefs: dict[str, bool] = field(default_factory=dict)
    zone_generation: int = 0  # bumped when the zone changes
    # (since, zone, quiet hours): every configuration the user had, oldest first
    history: list[tuple[datetime, str, Quiet | None]] = field(default_factory=list)

    def configs_since(self, instant: datetime) -> list[tuple[str, Quiet | None]]:
        """The (zone, quiet hours) in effect at ``instant`` and every one after it."""
        out = [(tz, q) for since, tz, q in self.history if since > instant]
        before = [(tz, q) for since, tz, q in self.history if since <= instant]
        return before[-1:] + out


def _placed_by_old_quiet(u: UserState, nominal: datetime) -> bool:
    """Whether quiet hours other than today's, in today's zone, covered ``nominal`` while
    it was within the planning horizon (see STALE_QUIET_PLACEMENT_TOLERATED)."""
    local = wall(nominal, u.tz).time()
    return any(
        q is not None and tz == u.tz and q != u.quiet and q.covers(local)
        for tz, q in u.configs_since(nominal - PLAN_HORIZON)
    )


@dataclass(frozen=True)
class ReminderState:
    category: str
    at: time
    body: str
    enabled: bool = True


@dataclass(frozen=True)
class OneOffRequest:
    category: str
    body: str
    send_at: datetime | None


@dataclass
class Expectation:
    key: Key
    category: str
    body: str
    nominal: datetime
    due: datetime | None  # when the model looks at it next; None once decided
    verdict: Verdict | None = None
    tokens: frozenset[str] = frozenset()  # where it arrives (ARRIVE)
    at: datetime | None = None  # when it was decided (and arrives, for ARRIVE)
    reason: str = ""
    generation: tuple[int, int] = (0, 0)  # (reminder, zone) generations when it fired
    disabled_when_fired: bool = False
    deferred: bool = False
    placed: bool = False  # quiet hours have placed it (at planning); the rest is decided later
    decided_seq: int = 0
    channel: str = "push"
    bypass_quiet: bool = False  # a critical event's messages (whatever their category)
    tz: str = ""  # a reminder's: the zone and local time it fired at
    local_at: time = time(0)

    @property
    def retries_maybe_sent(self) -> bool:
        return self.category in RETRY_MAYBE_SENT


@dataclass
class Binding:
    token: str
    active: bool = True


class Model:
    def __init__(self, now: datetime) -> None:
        self.now = now
        self.users: dict[str, UserState] = {}
        self.reminders: dict[tuple[str, str], ReminderState] = {}
        self.reminder_generation: dict[tuple[str, str], int] = {}
        # Every category a reminder had: a message planned (or in flight) before an edit
        # keeps the category it was planned with.
        self.categories_ever: dict[tuple[str, str], set[str]] = {}
        self.bindings: dict[tuple[str, str], Binding] = {}
        self.oneoffs: dict[Key, OneOffRequest] = {}
        self.expectations: dict[Key, Expectation] = {}
        self.seq = 0  # counts calls and decisions, to order them within one instant
        self.user_changed: dict[str, int] = {}  # user -> seq of the last call that changed it
        self._fired: set[tuple[Key, datetime]] = set()
        self.events: dict[str, EventProgress] = {}
        self.contacts: dict[tuple[str, str], str] = {}  # (user, channel) -> address
        self.suppressed: set[tuple[str, str]] = set()  # (channel, address)

    # ------------------------------------------------------------ API calls
    # Each returns the HTTP status the API must answer.

    def put_user(
        self, user: str, tz: str, quiet: Quiet | None, set_quiet: bool, enabled: bool | None
    ) -> int:
        """``set_quiet=False`` / ``enabled=None``: the field is left out of the request."""
        if set_quiet and quiet is not None and quiet.start == quiet.end:
            # Local times taken across a fall-back transition can coincide: the API
            # refuses an empty quiet period (422) and changes nothing.
            return 422
        self._changed(user)
        old = self.users.get(user)
        if old is None:
            self.users[user] = UserState(
                tz, quiet if set_quiet else None, True if enabled is None else enabled
            )
            self.users[user].history.append((self.now, tz, self.users[user].quiet))
            return 201
        new_quiet = quiet if set_quiet else old.quiet
        if tz != old.tz:
            old.zone_generation += 1
        if (tz, new_quiet) != (old.tz, old.quiet):
            for e in self._pending(user):
                # A one-off placed by quiet hours keeps that placement or not: not pinned down.
                if e.key[0] in ("o", "e") and e.deferred:
                    e.verdict = Verdict.UNKNOWN
        old.tz, old.quiet = tz, new_quiet
        old.history.append((self.now, tz, new_quiet))
        if enabled is not None:
            old.enabled = enabled
        return 200

    def _changed(self, user: str) -> None:
        self.seq += 1
        self.user_changed[user] = self.seq

    def changed_since_decided(self, e: Expectation) -> bool:
        return self.user_changed.get(e.key[1], 0) > e.decided_seq

    def put_reminder(self, user: str, rid: str, state: ReminderState) -> int:
        if user not in self.users:
            return 404
        self._changed(user)
        self.categories_ever.setdefault((user, rid), set()).add(state.category)
        old = self.reminders.get((user, rid))
        if old == state:
            return 200
        self.reminders[(user, rid)] = state
        self.reminder_generation[(user, rid)] = self.reminder_generation.get((user, rid), 0) + 1
        return 201 if old is None else 200

    def delete_reminder(self, user: str, rid: str) -> int:
        if user not in self.users or (user, rid) not in self.reminders:
            return 404
        self._changed(user)
        del self.reminders[(user, rid)]
        self.reminder_generation[(user, rid)] = self.reminder_generation.get((user, rid), 0) + 1
        return 204

    def register_device(self, user: str, device: str, token: str) -> int:
        if user not in self.users:
            return 404
        self._changed(user)
        for (u, d), b in self.bindings.items():
            if (u, d) != (user, device) and b.active and b.token == token:
                b.active = False  # the token moved: the old binding ends
                self._changed(u)
        self.bindings[(user, device)] = Binding(token)
        return 200

    def deactivate_device(self, user: str, device: str) -> int:
        if user not in self.users or (user, device) not in self.bindings:
            return 404
        self._changed(user)
        self.bindings[(user, device)].active = False
        return 204

    def set_preference(self, user: str, category: str, on: bool) -> int:
        if user not in self.users:
            return 404
        self._changed(user)
        self.users[user].prefs[category] = on
        return 200

    def post_oneoff(self, user: str, key: str, request: OneOffRequest) -> int:
        if user not in self.users:
            return 404
        k: Key = ("o", user, key)
        known = self.oneoffs.get(k)
        if known is not None:
            return 200 if known == request else 409
        self.oneoffs[k] = request
        self._changed(user)
        nominal = self.now
        if request.send_at and request.send_at > self.now:
            # Instants are kept to the millisecond (a BSON date's precision): a finer
            # send_at is rounded up, never down (down would be early).
            extra = timedelta(microseconds=request.send_at.microsecond % 1000)
            nominal = request.send_at if not extra else request.send_at - extra + _MS
        u = self.users[user]
        deferred = request.category not in BYPASS_QUIET and bool(
            u.quiet and u.quiet.covers(wall(nominal, u.tz).time())
        )
        self.expectations[k] = Expectation(
            k, request.category, request.body, nominal, nominal, deferred=deferred
        )
        return 201

    # ------------------------------------------------------------ contacts, suppressions

    def set_contact(self, user: str, channel: str, address: str | None) -> int:
        if user not in self.users:
            return 404
        self._changed(user)
        if address is None:
            self.contacts.pop((user, channel), None)
            return 204
        self.contacts[(user, channel)] = address
        return 200

    def suppress(self, channel: str, address: str, on: bool) -> int:
        known = (channel, address) in self.suppressed
        for (user, ch), a in self.contacts.items():
            if (ch, a) == (channel, address):
                self._changed(user)
        if on:
            self.suppressed.add((channel, address))
            return 200 if known else 201
        if not known:
            return 404
        self.suppressed.discard((channel, address))
        return 204

    # ------------------------------------------------------------ events

    def post_event(self, request: EventRequest) -> int:
        known = self.events.get(request.event_id)
        if known is not None:
            return 202 if known.request.same_as(request) else 409
        self.events[request.event_id] = EventProgress(request)
        return 202

    def fan_out_page(self, event_id: str, moved: bool) -> None:
        """One page of the event's recipients, in user-id order after its cursor: every
        (recipient, routed channel) gets its message now (an existing key is kept as it
        is); then, unless the fan-out died first (``moved`` False), the cursor moves and
        the page is counted."""
        ev = self.events[event_id]
        if ev.done:
            return
        req = ev.request
        pool = sorted(self.users) if req.users is None else sorted(set(req.users))
        page = [u for u in pool if u > ev.cursor][:EVENT_PAGE]
        unknown = 0
        not_routed: dict[str, int] = {}
        routes = EVENT_TYPES[req.type].routes
        for user in page:
            if user not in self.users:
                unknown += 1
                continue
            chosen = select_channels(routes, bool(self.active_tokens(user)))
            for channel, _ in routes:
                if channel not in chosen:
                    not_routed[channel] = not_routed.get(channel, 0) + 1
            for channel in chosen:
                self._event_message(ev, user, channel)
        if not moved:
            return
        if page:
            ev.cursor = page[-1]
        ev.recipients += len(page)
        ev.unknown += unknown
        for channel, n in not_routed.items():
            ev.not_routed[channel] = ev.not_routed.get(channel, 0) + n
        ev.done = len(page) < EVENT_PAGE

    def _event_message(self, ev: EventProgress, user: str, channel: str) -> None:
        req = ev.request
        k: Key = ("e", user, req.event_id, channel)
        if k in self.expectations:
            return  # the key is taken: the page done again creates nothing
        self._changed(user)
        nominal = self.now
        if req.send_at is not None:
            # Kept to the millisecond, rounded up: a send_at of "now" with a finer
            # instant is a little ahead of now once stored.
            extra = timedelta(microseconds=req.send_at.microsecond % 1000)
            kept = req.send_at if not extra else req.send_at - extra + _MS
            nominal = max(kept, self.now)
        u = self.users[user]
        bypass = ev.priority == "critical" or ev.category in BYPASS_QUIET
        deferred = not bypass and bool(u.quiet and u.quiet.covers(wall(nominal, u.tz).time()))
        e = Expectation(
            k,
            ev.category,
            req.text,
            nominal,
            nominal,
            deferred=deferred,
            channel=channel,
            bypass_quiet=bypass,
        )
        if not req.data_ok:
            # Rendered at fan-out: a template that does not render fails that message.
            self.seq += 1
            e.due, e.at, e.verdict, e.reason = None, self.now, Verdict.NO_ARRIVAL, "render_error"
            e.decided_seq = self.seq
        self.expectations[k] = e

    # ------------------------------------------------------------ time

    def advance(self, to: datetime) -> None:
        """Everything that happens in ``[now, to]``, in order."""
        assert to >= self.now
        while True:
            when = self._next_event(to)
            if when is None:
                break
            self.now = when
            self._fire_reminders(when, when)
            for e in list(self.expectations.values()):
                if e.due is not None and e.due <= when:
                    self._process(e)
        self.now = to

    def _next_event(self, to: datetime) -> datetime | None:
        times = [e.due for e in self.expectations.values() if e.due is not None and e.due <= to]
        times += [n for n, _ in self._triggers(self.now, to)]
        return min(times, default=None)

    def _triggers(self, start: datetime, end: datetime) -> list[tuple[datetime, Key]]:
        out = []
        for (user, rid), r in self.reminders.items():
            u = self.users[user]
            if not r.enabled:
                continue
            first = wall(start, u.tz).date() - timedelta(days=1)
            last = wall(end, u.tz).date() + timedelta(days=1)
            day = first
            while day <= last:
                nominal = rule_instant(day, r.at, u.tz)
                key: Key = ("r", user, rid, day.isoformat())
                if start <= nominal <= end and self._may_fire(key, nominal):
                    out.append((nominal, key))
                day += timedelta(days=1)
        return out

    def next_reminder_instant(self, within: timedelta) -> datetime | None:
        """The first instant after now, within ``within``, at which a reminder fires."""
        fires = self._triggers(self.now + timedelta(microseconds=1), self.now + within)
        return min((n for n, _ in fires), default=None)

    def _may_fire(self, key: Key, nominal: datetime) -> bool:
        if (key, nominal) in self._fired:
            return False
        e = self.expectations.get(key)
        return e is None or (e.due is None and e.verdict is not Verdict.ARRIVE)

    def _fire_reminders(self, start: datetime, end: datetime) -> None:
        for nominal, key in self._triggers(start, end):
            _, user, rid, _day = key
            r = self.reminders[(user, rid)]
            u = self.users[user]
            previous = self.expectations.get(key)
            self._fired.add((key, nominal))
            e = Expectation(
                key,
                r.category,
                r.body,
                nominal,
                nominal,
                generation=(self.reminder_generation[(user, rid)], u.zone_generation),
                disabled_when_fired=not u.enabled,
                tz=u.tz,
                local_at=r.at,
            )
            if STALE_QUIET_PLACEMENT_TOLERATED and _placed_by_old_quiet(u, nominal):
                e.verdict = Verdict.UNKNOWN
            if previous is not None:
                # Fired again after a skip, under a new configuration: whether the
                # skipped message still holds the date is not pinned down.
                e.verdict = Verdict.UNKNOWN
            self.expectations[key] = e

    def _process(self, e: Expectation) -> None:
        """Decide ``e`` now, or move it to the end of the quiet period."""
        user = e.key[1]
        u = self.users.get(user)
        now = self.now
        if not e.placed:
            # Planning places the nominal instant; every other check waits for send time.
            e.placed = True
            if u is not None and self._quiet_now(u, e):
                assert u.quiet is not None
                e.due = u.quiet.end_after(now, u.tz)
                e.deferred = True
                return
        verdict, reason = Verdict.ARRIVE, ""
        if u is None or not u.enabled:
            verdict, reason = Verdict.NO_ARRIVAL, "user_disabled"
        elif e.key[0] == "r":
            r = self.reminders.get((user, e.key[2]))
            gen = (self.reminder_generation.get((user, e.key[2]), 0), u.zone_generation)
            if r is None or not r.enabled:
                verdict, reason = Verdict.NO_ARRIVAL, "superseded"
            elif gen != e.generation or e.disabled_when_fired:
                verdict = Verdict.UNKNOWN
        if verdict is not Verdict.NO_ARRIVAL and u is not None:
            if not u.prefs.get(e.category, True):
                verdict, reason = Verdict.NO_ARRIVAL, "opted_out"
            elif self._quiet_now(u, e):
                assert u.quiet is not None
                e.due = u.quiet.end_after(now, u.tz)
                e.deferred = True
                return
            elif e.channel == "push" and not self.active_tokens(user):
                verdict, reason = Verdict.NO_ARRIVAL, "no_active_device"
            elif e.channel in CONTACT_CHANNELS:
                address = self.contacts.get((user, e.channel))
                if address is None:
                    verdict, reason = Verdict.NO_ARRIVAL, "no_contact"
                elif (e.channel, address) in self.suppressed:
                    verdict, reason = Verdict.NO_ARRIVAL, "suppressed"
        e.due = None
        e.at = now
        e.reason = reason
        self.seq += 1
        e.decided_seq = self.seq
        if verdict is not Verdict.NO_ARRIVAL:
            e.tokens = frozenset(self.targets(user, e.channel))
        if e.verdict is not Verdict.UNKNOWN:
            e.verdict = verdict

    def _quiet_now(self, u: UserState, e: Expectation) -> bool:
        return (
            e.category not in BYPASS_QUIET
            and not e.bypass_quiet
            and u.quiet is not None
            and u.quiet.covers(wall(self.now, u.tz).time())
        )

    # ------------------------------------------------------------ queries

    def active_tokens(self, user: str) -> set[str]:
        return {b.token for (u, _), b in self.bindings.items() if u == user and b.active}

    def targets(self, user: str, channel: str) -> set[str]:
        """Where a message of ``channel`` arrives now: the push tokens, the user's inbox,
        the e-mail address or phone number."""
        if channel == "push":
            return self.active_tokens(user)
        if channel == "inbox":
            return {user}
        address = self.contacts.get((user, channel))
        return set() if address is None else {address}

    def _pending(self, user: str) -> list[Expectation]:
        return [e for e in self.expectations.values() if e.key[1] == user and e.due is not None]
