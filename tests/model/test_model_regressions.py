"""Sequences the model-based test once found, replayed step by step (fast, fixed)."""

from __future__ import annotations

from datetime import UTC, datetime, time
from pathlib import Path

from tepat.sandbox.expo import ExpoSandbox
from tepat.sandbox.server import running_sandbox
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
