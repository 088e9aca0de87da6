"""Scenario ``plan``: N users x 3 daily reminders over every IANA zone, planned for 48 hours.

The planning runs as ``tepat plan --start ... --end ...`` in a child process, whose
wall time and peak RSS (``os.wait4``) are the figures; then the same command again,
which must create nothing.
"""

from __future__ import annotations

import asyncio
import re
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from bench import seed, store_view
from bench.activemq import ActiveMQ, remove_scheduled_jobs, scheduled_ids
from bench.config import Config
from bench.procs import Child, Exited, child_env, tepat_argv
from bench.report import Result, log
from tepat.domain.zones import available_zones

HORIZON = timedelta(hours=48)
START_AHEAD = timedelta(minutes=15)
PEAK_RSS_GOAL_MB = 300.0
_RESULT = re.compile(r"created (\d+), existing (\d+)")


def _run_plan(
    name: str, cfg: Config, start: datetime, end: datetime, workdir: Path
) -> tuple[Exited, int, int]:
    argv = tepat_argv("plan", "--start", start.isoformat(), "--end", end.isoformat())
    child = Child(name, argv, child_env(cfg.env()), workdir / f"{name}.log")
    exited = child.wait()
    match = _RESULT.search(child.log_text())
    if exited.returncode != 0 or match is None:
        raise RuntimeError(f"{name} failed ({exited.returncode}):\n{child.tail()}")
    return exited, int(match.group(1)), int(match.group(2))


def run_plan(
    workdir: Path, backend: str, broker: ActiveMQ | None, queue_prefix: str, users: int
) -> Result:
    db = workdir / "tepat.db"
    log(f"seeding {users} users x 3 reminders over every IANA zone in {db}")
    t = time.monotonic()
    reminders = asyncio.run(seed.seed_planning(db, users))
    seeding_s = time.monotonic() - t
    log(f"seeded in {seeding_s:.1f}s")
    cfg = Config(db, broker.url if broker else "embedded://", queue_prefix)
    # A window that starts a little ahead: nothing falls due while the plan runs, so on
    # ActiveMQ every batch is still in the scheduler when the bench counts them.
    start = datetime.now(UTC).replace(second=0, microsecond=0) + START_AHEAD
    end = start + HORIZON
    first, created, existing = _run_plan("plan-1", cfg, start, end, workdir)
    mps = created / first.wall_seconds
    log(
        f"plan 1: created {created}, existing {existing} in {first.wall_seconds:.1f}s "
        f"({mps:,.0f}/s), peak RSS {first.peak_rss_mb} MB"
    )
    second, created2, existing2 = _run_plan("plan-2", cfg, start, end, workdir)
    log(f"plan 2: created {created2}, existing {existing2} in {second.wall_seconds:.1f}s")

    stored = store_view.message_count(db)
    twice = store_view.duplicate_intents(db)
    statuses = store_view.status_counts(db)
    checks = {
        "second_run_created_0": created2 == 0,
        "second_run_found_all": existing2 == created + existing,
        "stored_equals_created": stored == created,
        "no_intent_planned_twice": twice == 0,
    }
    figures: dict[str, object] = {
        "messages_created": created,
        "messages_per_second": round(mps),
        "wall_seconds": round(first.wall_seconds, 2),
        "peak_rss_mb": first.peak_rss_mb,
        "second_run_created": created2,
        "second_run_existing": existing2,
        "second_run_wall_seconds": round(second.wall_seconds, 2),
        "second_run_peak_rss_mb": second.peak_rss_mb,
        "stored_messages": stored,
        "statuses": statuses,
        "seeding_seconds_not_counted": round(seeding_s, 1),
    }
    notes = [
        "wall time is the whole `tepat plan` process: interpreter start, store open, "
        "planning, inserts and enqueue",
    ]
    if broker is None:
        notes.append(
            "embedded: `tepat plan` leaves the messages on the outbox in the store (its own "
            "in-process broker would vanish on exit); `tepat serve` publishes them"
        )
        mps_goal = 20_000
    else:
        try:
            jobs, ids, distinct = scheduled_ids(broker, queue_prefix)
            waiting = store_view.unpublished_count(db)
            figures["broker_jobs"] = jobs
            figures["broker_ids"] = ids
            figures["outbox_waiting"] = waiting
            # The outbox publishes what is due within its publish-ahead window; the
            # rest waits in the store, marked, for the scheduler's outbox loop.
            checks["enqueued_each_once"] = ids == distinct and ids + waiting == created
        except TimeoutError:
            # the scheduler answers a BROWSE only after copying every job: with hundreds of
            # thousands of jobs that outlasts any sensible wait
            figures["broker_jobs"] = "BROWSE timed out (too many scheduled jobs to count)"
            notes.append("activemq: the scheduled jobs could not be counted (BROWSE timed out)")
        finally:
            removed = remove_scheduled_jobs(broker, queue_prefix)
        notes.append(
            "activemq: the outbox publishes the messages due within 10 minutes (one scheduled "
            "job per queue and due second, <=100 ids); the rest wait, marked, for the "
            "scheduler's outbox loop; the jobs were removed afterwards "
            f"({'REMOVEALL' if removed < 0 else removed})"
        )
        mps_goal = 10_000
    goals = {
        f"messages_per_second>={mps_goal}": mps >= mps_goal,
        f"peak_rss_mb<={PEAK_RSS_GOAL_MB:.0f}": first.peak_rss_mb <= PEAK_RSS_GOAL_MB,
    }
    return Result(
        scenario="plan",
        backend=backend,
        parameters={
            "users": users,
            "reminders": reminders,
            "zones": len(available_zones()),
            "horizon_hours": HORIZON.total_seconds() / 3600,
            "window": [start.isoformat(), end.isoformat()],
        },
        figures=figures,
        goals=goals,
        correctness=None,
        checks=checks,
        notes=notes,
    )
