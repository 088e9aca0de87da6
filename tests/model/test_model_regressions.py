"""Sequences the model-based test once found, replayed step by step (fast, fixed)."""

from __future__ import annotations

from datetime import UTC, datetime, time, timedelta
from pathlib import Path
from typing import Any, cast

import pytest

from tepat.sandbox.expo import ExpoSandbox
from tepat.sandbox.server import running_sandbox
from tests.model import reference
from tests.model.faults import Fault
from tests.model.machine import Env, TepatMachine
from tests.model.reference import Quiet


def test_a_oneoff_deferred_by_the_old_zones_quiet_hours_may_keep_its_placement(
    tmp_path: Path,
) -> None:
    """A meal one-off posted during Kolkata's quiet hours is deferred to 07:00 there;
    the user then moves to New York, where it is afternoon. Keeping the old
    placement is allowed (the model does not pin it down): still pending and
    scheduled ahead is waiting, not stuck."""
    with running_sandbox(ExpoSandbox()) as served:
        state = TepatMachine(Env("sqlite", tmp_path, served.sandbox, served.base_url))
        state.start(transition=datetime(2027, 3, 14, 7, 0, tzinfo=UTC), hours_before=0)
        try:
            for _ in range(21):
                state.advance(minutes=30)
                state.everything_agrees()
            quiet = Quiet(start=time(22, 0), end=time(7, 0))
            state.put_user(
                enabled=None,
                quiet=quiet,
                set_quiet=True,
                soon=None,
                twice=False,
                tz="Asia/Kolkata",
                user="ana",
            )
            state.post_oneoff(category="meal", key="k1", minutes=1, twice=False, user="ana")
            state.everything_agrees()
            state.put_user(
                enabled=None,
                quiet=None,
                set_quiet=False,
                soon=None,
                twice=False,
                tz="America/New_York",
                user="ana",
            )
            state.advance(minutes=45)
            state.everything_agrees()
        finally:
            state.teardown()


def test_a_reminder_planned_a_minute_ahead_is_published_in_time_by_the_outbox_loop(
    tmp_path: Path,
) -> None:
    """A reminder put a minute before its instant is a batch of one, still filling:
    the outbox publishes it only once due within publish_soon. The harness ticked
    the outbox only at its other jobs' instants, so it went out minutes late;
    a running process's loop passes every second."""
    with running_sandbox(ExpoSandbox()) as served:
        state = TepatMachine(Env("sqlite", tmp_path, served.sandbox, served.base_url))
        state.start(transition=datetime(2027, 3, 14, 7, 0, tzinfo=UTC), hours_before=0)
        try:
            state.put_user(
                enabled=None,
                quiet=None,
                set_quiet=False,
                soon=None,
                twice=False,
                tz="America/New_York",
                user="ana",
            )
            state.register_device(
                device="phone", token="ExponentPushToken[tok0]", twice=False, user="ana"
            )
            state.advance(minutes=30)
            state.put_reminder(
                at=time(0, 30),
                category="meal",
                enabled=True,
                rid="r1",
                soon=1,
                twice=False,
                user="ana",
                variant=0,
            )
            state.advance(minutes=30)
            state.everything_agrees()
        finally:
            state.teardown()


def test_a_critical_events_push_is_not_held_by_quiet_hours(tmp_path: Path) -> None:
    """A meal-category event posted with priority critical, inside the user's quiet
    hours: its messages are placed ignoring them and its e-mail goes at once, but the
    push path deferred the push message to the end of the quiet period (the dispatcher
    judged it by its category's policy alone; the channel sender by its priority too)."""
    with running_sandbox(ExpoSandbox()) as served:
        state = TepatMachine(Env("sqlite", tmp_path, served.sandbox, served.base_url))
        state.start(transition=datetime(2027, 3, 14, 7, 0, tzinfo=UTC), hours_before=0)
        try:
            state.put_user(
                enabled=None,
                quiet=None,
                set_quiet=True,
                soon=(-10, 20),
                twice=False,
                tz="America/New_York",
                user="ana",
            )
            state.register_device(
                device="phone", token="ExponentPushToken[tok0]", twice=False, user="ana"
            )
            state.set_contact(user="ana", channel="email", index=0)
            state.post_event(
                event_id="ev1",
                etype="model.notice",
                users=("ana",),
                minutes=None,
                priority="critical",
                variant=0,
                data_ok=True,
                twice=False,
            )
            state.everything_agrees()
            state.advance(minutes=30)
            state.everything_agrees()
        finally:
            state.teardown()


def test_a_reminder_date_skipped_in_one_zone_may_be_planned_again_in_a_zone_behind(
    tmp_path: Path,
) -> None:
    """Ana, disabled, in London: her 07:53 safety reminder's date passes unplanned
    (the model decides it: user_disabled). Enabled again and moved to New York, the
    same local date's 07:53 is still four hours ahead there, and it is planned. At the
    final check (before that instant) the message is pending and scheduled ahead:
    waiting, not stuck (the check used to demand a terminal state)."""
    with running_sandbox(ExpoSandbox()) as served:
        state = TepatMachine(Env("sqlite", tmp_path, served.sandbox, served.base_url))
        state.start(transition=datetime(2027, 3, 14, 7, 0, tzinfo=UTC), hours_before=0)
        try:
            state.put_user(
                enabled=False,
                quiet=None,
                set_quiet=True,
                soon=None,
                twice=False,
                tz="Europe/London",
                user="ana",
            )
            state.put_reminder(
                at=time(2, 30),
                category="safety",
                enabled=True,
                rid="r1",
                soon=60,
                twice=False,
                user="ana",
                variant=0,
            )
            state.advance(minutes=180)
            state.put_user(
                enabled=True,
                quiet=Quiet(start=time(22, 0), end=time(7, 0)),
                set_quiet=True,
                soon=None,
                twice=False,
                tz="America/New_York",
                user="ana",
            )
            state.everything_agrees()
        finally:
            state.teardown()


def test_a_consumer_dying_in_another_channel_takes_its_queued_push_with_it(
    tmp_path: Path,
) -> None:
    """An event's push, inbox and e-mail messages go at once; the consumer dies right
    after the inbox stored its item, while the push request waited in the batcher.
    The push message stays ``sending`` and the sweeper re-drives it after the lease.
    The harness let the dead consumer's queued request go out too, beside the
    re-drive (two copies, no fault on the push path to account for them); now a
    death abandons the batcher's requests, and one still on the wire (handed to the
    provider since the claim) is in the documented duplicate window."""
    with running_sandbox(ExpoSandbox()) as served:
        state = TepatMachine(Env("sqlite", tmp_path, served.sandbox, served.base_url))
        state.start(
            populate=True, hours_before=28, transition=datetime(2027, 4, 3, 15, 0, tzinfo=UTC)
        )
        try:
            state.post_event(
                data_ok=True,
                etype="model.notice",
                event_id="ev2",
                fault=Fault.CHANNEL_CRASH_AFTER_SEND,
                minutes=0,
                priority=None,
                twice=False,
                users=("ana",),
                variant=0,
            )
            state.everything_agrees()
            state.advance_a_little(minutes=16)
            state.everything_agrees()
        finally:
            state.teardown()


def test_an_event_repeated_naming_its_types_default_priority_is_the_same_request(
    tmp_path: Path,
) -> None:
    """model.alert is critical by default: posted once without a priority and again
    with "critical", it is the same request (202), not a conflicting one (the model
    compared the raw bodies and expected a 409)."""
    with running_sandbox(ExpoSandbox()) as served:
        state = TepatMachine(Env("mongo-mock", tmp_path, served.sandbox, served.base_url))
        state.start(
            populate=True, hours_before=12, transition=datetime(2027, 10, 31, 1, 0, tzinfo=UTC)
        )
        try:
            for priority in (None, "critical"):
                state.post_event(
                    data_ok=True,
                    etype="model.alert",
                    event_id="ev2",
                    fault=None,
                    minutes=2,
                    priority=priority,
                    twice=False,
                    users=("bob", "cy", "ana"),
                    variant=1,
                )
                state.everything_agrees()
        finally:
            state.teardown()


class _Drawn:
    """What a rule's ``data.draw`` returns in a replay: the value hypothesis drew."""

    def __init__(self, value: object) -> None:
        self._value = value

    def draw(self, strategy: object) -> object:
        return self._value


def test_time_passes_only_once_every_batch_in_hand_waits_on_the_clock(tmp_path: Path) -> None:
    """ev1's push is due at :55:00.000, ev2's (posted after a crash had moved the clock
    845 ms on) at :55:00.845, on another queue. Both batches are in hand at once; the
    harness moved the clock to .845 while ev1's batch was still at its store work, so
    ev1's push went out at .845 (the consumer itself holds each item to its own
    instant; the old harness failed here about one run in three, as real time fell).
    Time now passes only once every batch in hand waits on the clock."""
    with running_sandbox(ExpoSandbox()) as served:
        state = TepatMachine(Env("sqlite", tmp_path, served.sandbox, served.base_url))
        state.start(
            populate=True, hours_before=8, transition=datetime(2027, 4, 3, 15, 0, tzinfo=UTC)
        )
        try:
            state.post_event(
                data_ok=True,
                etype="model.alert",
                event_id="ev3",
                fault=Fault.CRASH_AFTER_CLAIM,
                minutes=0,
                priority=None,
                twice=False,
                users=("bob", "cy", "ana"),
                variant=0,
            )
            state.post_event(
                data_ok=True,
                etype="model.notice",
                event_id="ev1",
                fault=Fault.CHANNEL_TRY_AGAIN,
                minutes=2,
                priority=None,
                twice=False,
                users=None,
                variant=0,
            )
            state.everything_agrees()
            state.fan_out_page(data=cast(Any, _Drawn("ev3")), crash=False, concurrent=False)
            state.oneoff_burst(category="meal", count=2, minutes=60, user="ana")
            state.set_contact(channel="email", index=0, user="ana")
            state.fan_out_page(data=cast(Any, _Drawn("ev1")), crash=True, concurrent=True)
            state.everything_agrees()
            state.post_event(
                data_ok=True,
                etype="model.alert",
                event_id="ev2",
                fault=None,
                minutes=2,
                priority="critical",
                twice=True,
                users=None,
                variant=1,
            )
            state.advance_a_little(minutes=15)
            state.everything_agrees()
        finally:
            state.teardown()


def test_a_late_copy_may_wait_for_quiet_hours_since_edited_away(tmp_path: Path) -> None:
    """Two mood one-offs go out; the consumer dies after Expo accepted them (the
    duplicate window), and the re-drive meets quiet hours set meanwhile (20 minutes
    from then): the copies wait for their end, past the missed window. The user's
    quiet hours are then edited again; the check took only the current ones and
    called the copies too late. Every quiet hours since the instant count."""
    with running_sandbox(ExpoSandbox()) as served:
        state = TepatMachine(Env("sqlite", tmp_path, served.sandbox, served.base_url))
        state.start(
            populate=True, hours_before=18, transition=datetime(2027, 4, 3, 15, 0, tzinfo=UTC)
        )
        try:
            state.arm_fault(fault=Fault.CRASH_AFTER_ACCEPT)
            state.oneoff_burst(category="mood", count=2, minutes=1, user="ana")
            state.put_user(
                enabled=None,
                quiet=Quiet(start=time(1, 0), end=time(3, 0)),
                set_quiet=True,
                soon=(5, 35),
                twice=False,
                tz="America/New_York",
                user="ana",
            )
            state.advance_a_little(minutes=10)
            state.put_user(
                enabled=True,
                quiet=Quiet(start=time(12, 0), end=time(12, 45)),
                set_quiet=True,
                soon=(-10, 20),
                twice=True,
                tz="Europe/London",
                user="ana",
            )
            state.everything_agrees()
        finally:
            state.teardown()


def test_an_event_deferred_by_quiet_hours_after_a_crash_may_be_redriven_again(
    tmp_path: Path,
) -> None:
    """Bob's inbox item is claimed at its instant and the consumer dies; the re-drive
    meets quiet hours that began meanwhile and defers it to their end, where the
    consumer dies again after the claim: the second re-drive comes a lease later,
    within the missed window counted from the end of the quiet hours (the check
    allowed only the quiet hours' end)."""
    with running_sandbox(ExpoSandbox()) as served:
        state = TepatMachine(Env("sqlite", tmp_path, served.sandbox, served.base_url))
        state.start(transition=datetime(2027, 3, 14, 7, 0, tzinfo=UTC), hours_before=0)
        try:
            state.arm_fault(fault=Fault.CRASH_AFTER_CLAIM)
            state.post_event(
                data_ok=True,
                etype="model.notice",
                event_id="ev3",
                fault=None,
                minutes=None,
                priority=None,
                twice=False,
                users=("bob",),
                variant=0,
            )
            state.put_user(
                enabled=None,
                quiet=None,
                set_quiet=True,
                soon=(5, 35),
                twice=False,
                tz="America/New_York",
                user="bob",
            )
            state.advance(minutes=30)
            state.arm_fault(fault=Fault.CRASH_AFTER_CLAIM)
            state.advance(minutes=30)
            state.everything_agrees()
        finally:
            state.teardown()


def test_an_events_send_at_of_now_is_kept_to_the_millisecond_above(tmp_path: Path) -> None:
    """An event posted with send_at = now, when now has microseconds (a crash's re-drive
    moved the clock off the second): the stored send_at is rounded up to the
    millisecond, a little ahead of now, and the messages go then (the model took now)."""
    with running_sandbox(ExpoSandbox()) as served:
        state = TepatMachine(Env("sqlite", tmp_path, served.sandbox, served.base_url))
        state.start(
            populate=True, hours_before=0, transition=datetime(2027, 3, 14, 7, 0, tzinfo=UTC)
        )
        try:
            state.advance(minutes=30)
            # Off the second, as the re-drives and retries of a faulted send leave it.
            state.run(state.sut.advance_to(state.sut.clock.now() + timedelta(microseconds=844422)))
            state.ref.advance(state.sut.clock.now())
            state.post_event(
                data_ok=True,
                etype="model.notice",
                event_id="ev1",
                fault=None,
                minutes=0,
                priority=None,
                twice=False,
                users=None,
                variant=1,
            )
            state.advance_a_little(minutes=2)
            state.everything_agrees()
        finally:
            state.teardown()


def test_a_reminder_deferred_by_quiet_hours_since_removed_fires_at_its_instant(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Bob in St John's with quiet hours 09:00-10:00 puts a mood reminder at 09:30: it is
    planned for 10:00. He then removes his quiet hours; at 09:30 nothing is quiet, so the
    reminder is due then (the spec: it fires when the wall clock reads 09:30). Tepat kept
    the old placement and sent it at 10:00 (found by the model test)."""
    monkeypatch.setattr(reference, "STALE_QUIET_PLACEMENT_TOLERATED", False)
    with running_sandbox(ExpoSandbox()) as served:
        state = TepatMachine(Env("sqlite", tmp_path, served.sandbox, served.base_url))
        state.start(transition=datetime(2027, 3, 14, 5, 30, tzinfo=UTC), hours_before=0)
        try:
            tz = "America/St_Johns"
            state.put_user("bob", tz, Quiet(time(9, 0), time(10, 0)), None, True, None, False)
            state.register_device("bob", "phone", "ExponentPushToken[tok0]", False)
            state.put_reminder("bob", "r1", "mood", time(9, 30), None, 0, True, False)
            state.everything_agrees()
            state.put_user("bob", tz, None, None, True, None, False)
            state.everything_agrees()
            state.advance(minutes=7 * 60)  # 12:23Z, 09:53 in St John's (NDT)
            state.everything_agrees()
        finally:
            state.teardown()
