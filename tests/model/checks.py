"""The invariants: compare what the sandbox received and what the store holds with the model.

Checked after every step; :meth:`Checker.final` adds the ones that need time to
have passed (everything decided long enough ago has arrived, nothing is stuck).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from tepat.domain.models import Message, MessageStatus
from tests.model.faults import Taint
from tests.model.reference import (
    BYPASS_QUIET,
    MISSED_WINDOW,
    RETRY_MAYBE_SENT,
    Expectation,
    Key,
    Model,
    Verdict,
    rule_instant,
    wall,
)
from tests.model.system import Arrival, System, due_of

LEASE = timedelta(seconds=300)  # TEPAT_SENDING_LEASE_SECONDS's default
GRACE = timedelta(seconds=360)  # the sweeper's grace: the longest retry backoff + 60 s
SLACK = timedelta(minutes=2)  # job ticks and whole seconds
# After this, a message is terminal and a late (re-driven) arrival has happened.
SETTLED = MISSED_WINDOW + LEASE + GRACE + SLACK

TERMINAL = {"delivered", "failed", "skipped", "missed", "cancelled"}


class Violation(AssertionError):
    pass


def message_key(m: Message) -> Key:
    if m.dedup_key.startswith("e|"):
        _, event_id, user_id, channel = m.dedup_key.split("|")
        return ("e", user_id, event_id, channel)
    if m.reminder_id is not None and m.local_date is not None:
        return ("r", m.user_id, m.reminder_id, m.local_date.isoformat())
    return ("o", m.user_id, m.idempotency_key or f"?{m.id}")


@dataclass
class Checker:
    arrivals: dict[Key, list[Arrival]] = field(default_factory=dict)
    keys: dict[str, Key] = field(default_factory=dict)  # message id -> key
    statuses: dict[str, list[str]] = field(default_factory=dict)
    # user -> every push token, inbox and contact address it had
    tokens_ever: dict[str, set[str]] = field(default_factory=dict)
    inbox_seen: set[str] = field(default_factory=set)  # inbox item ids

    async def step(self, model: Model, system: System, *, final: bool = False) -> None:
        for (user, _), b in model.bindings.items():
            self.tokens_ever.setdefault(user, set()).add(b.token)
        for (user, _), address in model.contacts.items():
            self.tokens_ever.setdefault(user, set()).add(address)
        for user in model.users:
            self.tokens_ever.setdefault(user, set()).add(user)
        users = sorted(model.users)
        messages = await system.messages(users)
        by_key: dict[Key, list[Message]] = {}
        for m in messages:
            key = message_key(m)
            self.keys[m.id] = key
            by_key.setdefault(key, []).append(m)
            self._status(m)
        arrivals = system.new_arrivals() + await self._channel_arrivals(system, users)
        fresh: list[tuple[Key, Arrival, int]] = []
        for a in arrivals:
            if a.message_id not in self.keys:
                stored = await system.real_store.get_message(a.message_id)
                if stored is None:
                    raise Violation(f"{a} arrived for no stored message")
                self.keys[a.message_id] = message_key(stored)
            key = self.keys[a.message_id]
            seen = self.arrivals.setdefault(key, [])
            seen.append(a)
            fresh.append((key, a, len(seen)))
        taints = self._taints_by_key(system)
        for key, a, upto in fresh:
            self._arrival(model, key, a, taints.get(key, []), self.arrivals[key][:upto])
        self._event_messages(model, by_key)
        self._planned(model, by_key, system.clock.now())
        await self._event_status(model, system, by_key)
        now = system.clock.now()
        for key, e in model.expectations.items():
            self._complete(model, e, taints.get(key, []), now, final)
            self._honest(e, by_key.get(key, []), now, final)
        for m in messages:
            self._not_stuck(m, now)
        await self._devices(model, system)

    # ------------------------------------------------------------ arrivals

    def _arrival(
        self, model: Model, key: Key, a: Arrival, taints: list[Taint], so_far: list[Arrival]
    ) -> None:
        e = model.expectations.get(key)
        where = f"{key} arrived at {a.at:%Y-%m-%d %H:%M:%S.%f}Z on {a.token}"
        if e is None:
            raise Violation(f"{where}: the model expects nothing for it")
        # Sent later than decided (a fault), after the user's world changed: the
        # send-time checks saw another world than the model's decision did.
        relaxed = bool(taints) and e.at is not None and model.changed_since_decided(e)
        if e.verdict is Verdict.NO_ARRIVAL and not relaxed:
            raise Violation(f"{where}: the model says it must not arrive ({e.reason})")
        # A push message goes to each active device; any other to its one target (a
        # contact changed between two sends of it makes the second one a copy too).
        count = sum(1 for x in so_far if x.token == a.token or e.channel != "push")
        if count > self._limit(model, e, a, taints):
            raise Violation(f"{where}: copy number {count} (taints: {_names(taints)})")
        if e.verdict is Verdict.UNKNOWN:
            return
        if e.at is None:
            raise Violation(f"{where}: before its instant ({e.due:%Y-%m-%d %H:%M}Z, model)")
        tokens = self.tokens_ever.get(key[1], set()) if relaxed else e.tokens
        if a.token not in tokens:
            raise Violation(f"{where}: not an active device then (model: {sorted(e.tokens)})")
        if not taints:
            if a.at != e.at:
                raise Violation(f"{where}: the model says at {e.at:%Y-%m-%d %H:%M:%S.%f}Z")
            if a.body != e.body:
                raise Violation(f"{where}: with body {a.body!r}, the model says {e.body!r}")
        elif not e.at <= a.at <= _latest(model, e, key):
            raise Violation(
                f"{where}: outside [{e.at:%H:%M:%S}Z + missed window] (taints: {_names(taints)})"
            )

    @staticmethod
    def _limit(model: Model, e: Expectation, a: Arrival, taints: list[Taint]) -> int:
        if e.channel == "inbox":
            return 1  # one item per (user, message id), whatever ran twice
        # The documented window: a crash after the provider accepted, once per crash;
        # and safety retries what may have been sent (a timeout or 5xx after sending).
        limit = 1 + taints.count(Taint.DUPLICATE)
        # A reminder's message keeps the category it was planned with: one claimed
        # before an edit of the category goes with the old one.
        planned_as = a.category in model.categories_ever.get((e.key[1], e.key[2]), ())
        if e.retries_maybe_sent or (
            e.key[0] == "r" and planned_as and a.category in RETRY_MAYBE_SENT
        ):
            limit += taints.count(Taint.MAYBE_SENT)
        return limit

    def _complete(
        self, model: Model, e: Expectation, taints: list[Taint], now: datetime, final: bool
    ) -> None:
        """An arrival the model demands has happened by now."""
        if e.verdict is not Verdict.ARRIVE or e.at is None:
            return
        if Taint.MAYBE_SENT in taints or Taint.REFUSED in taints:
            return
        settled = max(e.at + SETTLED, _latest(model, e, e.key))
        if taints and (now < settled or model.changed_since_decided(e)):
            return
        got = {a.token for a in self.arrivals.get(e.key, [])}
        missing = e.tokens - got
        if missing:
            raise Violation(
                f"{e.key} ({e.category}, {e.body!r}) should have arrived at "
                f"{e.at:%Y-%m-%d %H:%M:%S}Z on {sorted(missing)}; it did not "
                f"(taints: {_names(taints)}{', final check' if final else ''})"
            )

    def _honest(self, e: Expectation, stored: list[Message], now: datetime, final: bool) -> None:
        """A message that must not (or need not) arrive ends terminal, with a reason."""
        if e.at is None or e.verdict is Verdict.ARRIVE or now < e.at + SETTLED:
            return
        for m in stored:
            status = str(m.status)
            ahead = m.status is MessageStatus.PENDING and m.due > now
            if ahead and (e.verdict is Verdict.UNKNOWN or e.key[0] == "r"):
                # Not pinned down (e.g. a one-off deferred by the old zone's quiet
                # hours before a zone change): keeping the old placement is allowed,
                # so a message still scheduled ahead is waiting, not stuck. And a
                # reminder's local date decided (skipped) in one zone comes round again
                # in a zone behind it: the model fires it again then (_may_fire), and
                # the message planned for it meanwhile waits for that instant.
                continue
            if status not in TERMINAL and status != "sent":
                raise Violation(f"{e.key}: message {m.id} still {status} at {now:%H:%M}Z")
            closed = status in TERMINAL and status != "delivered"
            if e.verdict is Verdict.NO_ARRIVAL and closed and not m.status_reason:
                raise Violation(f"{e.key}: message {m.id} ended {status} without a reason")

    # ------------------------------------------------------------ channels, events

    async def _channel_arrivals(self, system: System, users: list[str]) -> list[Arrival]:
        """What the e-mail and SMS providers took, and the inbox items stored, since the
        last step; an inbox holds one item per (user, message id), ever."""
        out = [
            Arrival(s.target, s.message_id, s.at, s.body, s.category)
            for s in system.new_channel_sends()
        ]
        items = await system.inbox_items(users)
        held = Counter((i.user_id, i.message_id) for i in items)
        for (user, message_id), n in held.items():
            if n > 1:
                raise Violation(f"inbox of {user} holds {n} items of message {message_id}")
        for i in sorted(items, key=lambda i: i.seq):
            if i.item_id not in self.inbox_seen:
                self.inbox_seen.add(i.item_id)
                out.append(Arrival(i.user_id, i.message_id, i.created_at, i.body, i.category))
        return out

    @staticmethod
    def _planned(model: Model, by_key: dict[Key, list[Message]], now: datetime) -> None:
        """Every planned reminder message is at the instant its local date and time name in
        its zone (spring-forward gaps read with the offset before, repeated hours at their
        first pass: computed here, not by the planner); one still pending ahead follows
        the reminder and zone as they are now. None is placed before its instant (quiet
        hours set after planning leave it where it was: a re-plan keeps a message whose
        intent is unchanged, and the send defers it)."""
        for key, stored in by_key.items():
            if key[0] != "r":
                continue
            for m in stored:
                if m.local_date is None or m.local_time is None:
                    raise Violation(f"{key}: message {m.id} has no local date or time")
                nominal = m.nominal_at or m.scheduled_at
                want = rule_instant(m.local_date, m.local_time, m.timezone)
                if nominal != want:
                    raise Violation(
                        f"{key}: message {m.id} ({m.status}) at {nominal:%Y-%m-%d %H:%M}Z for "
                        f"{m.local_time:%H:%M} in {m.timezone}; that is {want:%Y-%m-%d %H:%M}Z"
                    )
                if m.scheduled_at < nominal:
                    raise Violation(
                        f"{key}: message {m.id} scheduled at {m.scheduled_at:%Y-%m-%d %H:%M}Z,"
                        f" before its instant {nominal:%Y-%m-%d %H:%M}Z"
                    )
                r = model.reminders.get((key[1], key[2]))
                u = model.users.get(key[1])
                if m.status is not MessageStatus.PENDING or nominal <= now:
                    continue
                if r is None or not r.enabled or u is None or not u.enabled:
                    continue
                if (m.local_time.replace(second=0), m.timezone) != (r.at, u.tz):
                    raise Violation(
                        f"{key}: message {m.id} pending at {m.local_time:%H:%M} in {m.timezone};"
                        f" the reminder is at {r.at:%H:%M} and the user in {u.tz} now"
                    )

    @staticmethod
    def _event_messages(model: Model, by_key: dict[Key, list[Message]]) -> None:
        """A message for every (event, user, channel) the fan-out routed, and no other."""
        for key, e in model.expectations.items():
            if key[0] == "e" and not by_key.get(key):
                raise Violation(f"{key}: fanned out, routed ({e.channel}), no message stored")
        for key, stored in by_key.items():
            if key[0] == "e" and key not in model.expectations:
                raise Violation(
                    f"{key}: message {stored[0].id} ({stored[0].status}) stored; the model "
                    "routed nothing there"
                )
            if key[0] == "e" and len(stored) > 1:
                raise Violation(f"{key}: {len(stored)} messages: {[m.id for m in stored]}")

    @staticmethod
    async def _event_status(model: Model, system: System, by_key: dict[Key, list[Message]]) -> None:
        """``GET /v1/events/{id}`` agrees with the model's fan-out and the stored messages."""
        for event_id, ev in sorted(model.events.items()):
            r = await system.http.get(f"/v1/events/{event_id}")
            if r.status_code != 200:
                raise Violation(f"GET event {event_id}: {r.status_code} {r.text[:300]}")
            got = r.json()
            where = f"GET event {event_id}"
            state = "done" if ev.done else "fanning_out"
            if got["state"] != state:
                raise Violation(f"{where}: state {got['state']}, the model says {state}")
            if (got["recipients"], got["unknown_users"]) != (ev.recipients, ev.unknown):
                raise Violation(
                    f"{where}: recipients {got['recipients']}, unknown {got['unknown_users']};"
                    f" the model says {ev.recipients}, {ev.unknown}"
                )
            stored: dict[str, Counter[str]] = {}
            for key, ms in by_key.items():
                if key[0] == "e" and key[2] == event_id:
                    for m in ms:
                        stored.setdefault(key[3], Counter())[str(m.status)] += 1
            for channel in sorted(set(stored) | set(got["channels"]) | set(ev.not_routed)):
                counts = got["channels"].get(channel, {})
                by_status = dict(counts.get("by_status", {}))
                if by_status != dict(stored.get(channel, {})):
                    raise Violation(
                        f"{where}: {channel} by status {by_status}, the store holds "
                        f"{dict(stored.get(channel, {}))}"
                    )
                routed_not = counts.get("skipped", {}).get("not_routed", 0)
                if routed_not != ev.not_routed.get(channel, 0):
                    raise Violation(
                        f"{where}: {channel} not_routed {routed_not}, the model says "
                        f"{ev.not_routed.get(channel, 0)}"
                    )

    # ------------------------------------------------------------ store

    def _status(self, m: Message) -> None:
        history = self.statuses.setdefault(m.id, [])
        status = str(m.status)
        if history and history[-1] != status:
            before = history[-1]
            if before in TERMINAL or (before == "sent" and status not in ("delivered", "failed")):
                raise Violation(
                    f"message {m.id} {message_key(m)} went {before} -> {status} (history {history})"
                )
        if not history or history[-1] != status:
            history.append(status)

    @staticmethod
    def _not_stuck(m: Message, now: datetime) -> None:
        if m.status not in (MessageStatus.PENDING, MessageStatus.SENDING):
            return
        due = max(m.scheduled_at, due_of(m))
        if due + SETTLED < now:
            raise Violation(
                f"message {m.id} {message_key(m)} still {m.status} at {now:%Y-%m-%d %H:%M}Z, "
                f"due {due:%Y-%m-%d %H:%M}Z ({m.status_reason or m.last_error or 'no reason'})"
            )

    @staticmethod
    async def _devices(model: Model, system: System) -> None:
        stored = await system.devices(sorted(model.users))
        for (user, device), b in model.bindings.items():
            got = stored.get((user, device))
            if got != (b.token, b.active):
                raise Violation(
                    f"device {user}/{device}: store has {got}, the model says "
                    f"({b.token!r}, active={b.active})"
                )
        for key in stored.keys() - model.bindings.keys():
            raise Violation(f"device {key} is in the store; no call registered it")

    def _taints_by_key(self, system: System) -> dict[Key, list[Taint]]:
        out: dict[Key, list[Taint]] = {}
        for message_id, taints in system.taints.items():
            key = self.keys.get(message_id)
            if key is not None:
                out.setdefault(key, []).extend(taints)
        return out


def _latest(model: Model, e: Expectation, key: Key) -> datetime:
    """The latest a late (faulted) arrival may come: within the missed window, or, when
    the late send met quiet hours (they began after the instant), at their end: the
    send-time check defers it there, as it would any message due in them, and a fault
    after that delays it within the missed window from there. Every quiet hours the
    user had since the instant count (the late send met the ones then)."""
    assert e.at is not None
    latest = e.at + MISSED_WINDOW + SLACK
    user = model.users.get(key[1])
    if e.category in BYPASS_QUIET or e.bypass_quiet or user is None:
        return latest
    for tz, quiet in user.configs_since(e.at):
        if quiet is None:
            continue
        t = e.at
        while t <= e.at + MISSED_WINDOW + SLACK:
            if quiet.covers(wall(t, tz).time()):
                # Deferred to their end, it has its missed window from there (another
                # fault then delays it within that window).
                latest = max(latest, quiet.end_after(t, tz) + MISSED_WINDOW + SLACK)
            t += timedelta(minutes=1)
    return latest


def _names(taints: list[Taint]) -> str:
    return ", ".join(sorted({t.value for t in taints})) or "none"
