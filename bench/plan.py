"""Scenario ``plan``: N users x 3 daily reminders over every IANA zone, planned for 48 hours.

The planning runs as ``tepat plan --start ... --end ... [--workers N]`` in a child
process, whose wall time and peak RSS (``os.wait4``: the largest process, a worker's
or the parent's) are the figures; then the same command again, which must read no
user (every planning mark covers the window) and create nothing; then the window
moved 10 minutes on, as the scheduler's next run sees it, which plans only the
users with something in the new slice.

``--scale`` (scenario ``plan`` only): the first two runs at 10k, 100k and 1M users,
one database each, to show how time and memory grow.
"""

from __future__ import annotations

import asyncio
import re
import shutil
import time
from dataclasses import dataclass
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
NEXT_RUN = timedelta(minutes=10)  # the scheduler's plan-ahead interval
PEAK_RSS_GOAL_MB = 300.0
SECOND_RUN_GOAL_S = 2.0
SCALE_USERS = (10_000, 100_000, 1_000_000)
QUICK_SCALE_USERS = (1_000, 2_000)
_RESULT = re.compile(r"created (\d+), existing (\d+) \((\d+) users in ([\d.]+) s")


@dataclass(frozen=True)
class Run:
    exited: Exited
    created: int
    existing: int
    users_planned: int
    plan_seconds: float  # inside the process, from its start of work to its summary

    @property
    def wall_seconds(self) -> float:
        return self.exited.wall_seconds


def _run_plan(
    name: str, cfg: Config, start: datetime, end: datetime, workdir: Path, workers: int
) -> Run:
    argv = tepat_argv(
        "plan", "--start", start.isoformat(), "--end", end.isoformat(), "--workers", str(workers)
    )
    child = Child(name, argv, child_env(cfg.env()), workdir / f"{name}.log")
    exited = child.wait()
    match = _RESULT.search(child.log_text())
    if exited.returncode != 0 or match is None:
        raise RuntimeError(f"{name} failed ({exited.returncode}):\n{child.tail()}")
    created, existing, users = (int(g) for g in match.groups()[:3])
    return Run(exited, created, existing, users, float(match.group(4)))


def _window() -> tuple[datetime, datetime]:
    # A window that starts a little ahead: nothing falls due while the plan runs, so on
    # ActiveMQ every batch is still in the scheduler when the bench counts them.
    start = datetime.now(UTC).replace(second=0, microsecond=0) + START_AHEAD
    return start, start + HORIZON


def _seed(db: Path, users: int) -> tuple[int, float]:
    log(f"seeding {users} users x 3 reminders over every IANA zone in {db}")
    t = time.monotonic()
    reminders = asyncio.run(seed.seed_planning(db, users))
    seeding_s = time.monotonic() - t
    log(f"seeded in {seeding_s:.1f}s")
    return reminders, seeding_s


def run_plan(
    workdir: Path,
    backend: str,
    broker: ActiveMQ | None,
    queue_prefix: str,
    users: int,
    workers: int = 1,
) -> Result:
    db = workdir / "tepat.db"
    reminders, seeding_s = _seed(db, users)
    cfg = Config(db, broker.url if broker else "embedded://", queue_prefix)
    start, end = _window()
    first = _run_plan("plan-1", cfg, start, end, workdir, workers)
    created, existing = first.created, first.existing
    mps = created / first.wall_seconds
    log(
        f"plan 1: created {created}, existing {existing}, {first.users_planned} users in "
        f"{first.wall_seconds:.1f}s ({mps:,.0f}/s), peak RSS {first.exited.peak_rss_mb} MB"
    )
    second = _run_plan("plan-2", cfg, start, end, workdir, workers)
    log(
        f"plan 2: created {second.created}, existing {second.existing}, "
        f"{second.users_planned} users read, in {second.wall_seconds:.2f}s"
    )
    later = _run_plan("plan-3", cfg, start + NEXT_RUN, end + NEXT_RUN, workdir, workers)
    log(
        f"plan 3 (window {NEXT_RUN} on): created {later.created}, existing {later.existing}, "
        f"{later.users_planned} users read, in {later.wall_seconds:.2f}s"
    )

    stored = store_view.message_count(db)
    twice = store_view.duplicate_intents(db)
    statuses = store_view.status_counts(db)
    checks = {
        "first_run_planned_every_user": first.users_planned == users,
        "second_run_created_0": second.created == 0,
        "second_run_read_no_user": second.users_planned == 0,
        "stored_equals_created": stored == created + later.created,
        "no_intent_planned_twice": twice == 0,
    }
    figures: dict[str, object] = {
        "workers": workers,
        "messages_created": created,
        "messages_per_second": round(mps),
        "wall_seconds": round(first.wall_seconds, 2),
        "peak_rss_mb": first.exited.peak_rss_mb,
        "second_run_created": second.created,
        "second_run_users_read": second.users_planned,
        "second_run_users_skipped": users - second.users_planned,
        "second_run_wall_seconds": round(second.wall_seconds, 2),
        "second_run_plan_seconds": round(second.plan_seconds, 2),
        "second_run_peak_rss_mb": second.exited.peak_rss_mb,
        "next_run_users_read": later.users_planned,
        "next_run_created": later.created,
        "next_run_existing": later.existing,
        "next_run_wall_seconds": round(later.wall_seconds, 2),
        "stored_messages": stored,
        "statuses": statuses,
        "seeding_seconds_not_counted": round(seeding_s, 1),
    }
    notes = [
        "wall time is the whole `tepat plan` process: interpreter start, store open, "
        "planning, inserts and enqueue; plan_seconds is the planning inside it",
        f"next run: the window moved {NEXT_RUN} on (the scheduler's interval); it reads "
        "only the users with an occurrence in the new slice",
    ]
    if workers > 1:
        notes.append(
            f"{workers} worker processes, each a user-id range; peak RSS is the largest "
            "single process (os.wait4), not their sum"
        )
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
            checks["enqueued_each_once"] = (
                ids == distinct and ids + waiting == created + later.created
            )
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
        f"peak_rss_mb<={PEAK_RSS_GOAL_MB:.0f}": first.exited.peak_rss_mb <= PEAK_RSS_GOAL_MB,
        f"second_run_wall_seconds<={SECOND_RUN_GOAL_S:.0f}": (
            second.wall_seconds <= SECOND_RUN_GOAL_S
        ),
    }
    return Result(
        scenario="plan",
        backend=backend,
        parameters={
            "users": users,
            "workers": workers,
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


def run_plan_scale(
    workdir: Path,
    backend: str,
    broker: ActiveMQ | None,
    queue_prefix: str,
    sizes: tuple[int, ...] = SCALE_USERS,
    workers: int = 1,
) -> Result:
    """The first and second runs at each size, one fresh database each."""
    figures: dict[str, object] = {}
    goals: dict[str, bool] = {}
    checks: dict[str, bool] = {}
    for users in sizes:
        where = workdir / f"scale-{users}"
        where.mkdir()
        db = where / "tepat.db"
        _, seeding_s = _seed(db, users)
        cfg = Config(db, broker.url if broker else "embedded://", f"{queue_prefix}{users}.")
        start, end = _window()
        first = _run_plan(f"plan-{users}-1", cfg, start, end, where, workers)
        second = _run_plan(f"plan-{users}-2", cfg, start, end, where, workers)
        mps = first.created / first.wall_seconds
        rss = first.exited.peak_rss_mb
        log(
            f"{users} users: {first.created} messages in {first.wall_seconds:.1f}s "
            f"({mps:,.0f}/s), peak RSS {rss} MB; second run {second.wall_seconds:.2f}s"
        )
        figures[f"{users}_users"] = {
            "messages": first.created,
            "wall_seconds": round(first.wall_seconds, 2),
            "messages_per_second": round(mps),
            "peak_rss_mb": rss,
            "second_run_wall_seconds": round(second.wall_seconds, 2),
            "second_run_users_read": second.users_planned,
            "seeding_seconds_not_counted": round(seeding_s, 1),
        }
        goals[f"{users}: messages_per_second>=20000"] = mps >= 20_000
        goals[f"{users}: peak_rss_mb<={PEAK_RSS_GOAL_MB:.0f}"] = rss <= PEAK_RSS_GOAL_MB
        goals[f"{users}: second_run_wall_seconds<={SECOND_RUN_GOAL_S:.0f}"] = (
            second.wall_seconds <= SECOND_RUN_GOAL_S
        )
        checks[f"{users}: every_user_planned"] = first.users_planned == users
        checks[f"{users}: second_run_created_0"] = second.created == 0
        checks[f"{users}: no_intent_planned_twice"] = store_view.duplicate_intents(db) == 0
        if broker is not None:
            remove_scheduled_jobs(broker, f"{queue_prefix}{users}.")
        shutil.rmtree(where, ignore_errors=True)  # a million users' database is gigabytes
    return Result(
        scenario="plan-scale",
        backend=backend,
        parameters={
            "users": list(sizes),
            "reminders_per_user": 3,
            "workers": workers,
            "horizon_hours": HORIZON.total_seconds() / 3600,
        },
        figures=figures,
        goals=goals,
        correctness=None,
        checks=checks,
        notes=[
            "each size in a fresh database; wall time is the whole `tepat plan` process",
            "peak RSS: the largest single process (os.wait4)",
        ],
    )
