"""The processes of one chaos run, and the moves a fault script makes with them.

One rig per fault kind: a fresh store (a SQLite file, or a MongoDB-wire server of its
own: :mod:`bench.chaos_store`) seeded with recipients, the Expo sandbox process, and
Tepat's own processes with a short sweeper lease:

* embedded: one ``python -m bench.chaos_host`` (consumer + sweeper + outbox publisher,
  the broker inside it), started again after each kill;
* ActiveMQ: ``tepat scheduler`` (sweeper + outbox publisher + creator) and ``tepat
  consumers`` processes.

Messages are inserted through the Store API with their outbox mark, in cohorts, so the
outbox publisher (or, on embedded, the host's restore on start) puts them on the broker.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from bench import seed
from bench.activemq import ActiveMQ
from bench.chaos_host import STATS_ENV
from bench.chaos_store import ChaosStore, MongoServer, chaos_store
from bench.config import Config
from bench.mongo_wire import MongoWire
from bench.procs import Child, child_env, tepat_argv
from bench.report import log
from bench.sandbox import Sandbox, running_sandbox
from tepat.adapters.stomp import StompBroker

READY_EMBEDDED = "embedded queue restored from the store"
READY = "runtime ready"


@dataclass(frozen=True)
class Timing:
    """The sweeper's settings for a run: short, so that a re-drive comes in seconds."""

    lease_s: float
    sweep_interval_s: float = 1.0
    grace_s: float = 5.0
    outbox_interval_s: float = 0.5

    def env(self) -> dict[str, str]:
        return {
            "TEPAT_SENDING_LEASE_SECONDS": str(self.lease_s),
            "TEPAT_SWEEP_INTERVAL_SECONDS": str(self.sweep_interval_s),
            "TEPAT_SWEEP_GRACE_SECONDS": str(self.grace_s),
            "TEPAT_OUTBOX_INTERVAL_SECONDS": str(self.outbox_interval_s),
        }


@dataclass
class Rig:
    workdir: Path
    store: ChaosStore
    broker: ActiveMQ | None
    sandbox: Sandbox
    cfg: Config
    timing: Timing
    recipients: int
    consumers: list[Child] = field(default_factory=list)
    scheduler: Child | None = None
    dead: list[Child] = field(default_factory=list)  # killed or stopped, for the logs
    kills: list[datetime] = field(default_factory=list)
    exited_early: list[str] = field(default_factory=list)
    due: dict[str, seed.Due] = field(default_factory=dict)
    _next: int = 0
    _started: int = 0

    @property
    def embedded(self) -> bool:
        return self.broker is None

    @property
    def store_kind(self) -> str:
        return "mongo" if isinstance(self.store, MongoServer) else "sqlite"

    @property
    def wire(self) -> MongoWire:
        """The run's own wire server (``--store mongo``), for store_restart to kill."""
        if not isinstance(self.store, MongoServer):
            raise ValueError("only a MongoDB store has a server to restart")
        return self.store.wire

    @property
    def stats_path(self) -> Path:
        return self.workdir / "broker-stats.json"

    def env(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        return child_env(
            {
                **self.cfg.env(),
                **self.timing.env(),
                STATS_ENV: str(self.stats_path),
                **(extra or {}),
            }
        )

    # ---- processes ----

    def start_scheduler(self) -> None:
        """ActiveMQ: the sweeper and the outbox publisher (embedded: inside the host)."""
        if self.embedded:
            return
        self.scheduler = Child(
            "scheduler", tepat_argv("scheduler"), self.env(), self.workdir / "scheduler.log"
        )
        self.scheduler.wait_for_line(READY, 60)

    def start_consumer(self, extra_env: dict[str, str] | None = None, wait: bool = True) -> Child:
        self._started += 1
        name = f"consumer-{self._started}"
        argv = (
            [sys.executable, "-m", "bench.chaos_host"] if self.embedded else tepat_argv("consumers")
        )
        child = Child(name, argv, self.env(extra_env), self.workdir / f"{name}.log")
        self.consumers.append(child)
        if wait:
            child.wait_for_line(READY_EMBEDDED if self.embedded else READY, 120)
        return child

    def kill(self, child: Child) -> datetime:
        """SIGKILL: no drain, no ack, nothing recorded after this instant."""
        os.kill(child.pid, signal.SIGKILL)
        at = datetime.now(UTC)
        child.wait(30)
        self.kills.append(at)
        self.consumers.remove(child)
        self.dead.append(child)
        log(f"killed {child.name} (pid {child.pid})")
        return at

    def stop_all(self) -> list[int]:
        """SIGTERM every process (a clean drain); their exit codes."""
        codes = []
        for c in [*self.consumers, *([self.scheduler] if self.scheduler else [])]:
            codes.append(c.stop(60).returncode)
            if codes[-1] != 0:
                log(f"{c.name} exited with {codes[-1]}:\n{c.tail()}")
        self.dead.extend(self.consumers)
        self.consumers.clear()
        return codes

    def died(self) -> list[str]:
        """Processes that exited without being told to (logged once each)."""
        out = []
        for c in [*self.consumers, *([self.scheduler] if self.scheduler else [])]:
            if not c.alive():
                out.append(c.name)
                if c.name not in self.exited_early:
                    self.exited_early.append(c.name)
                    log(f"{c.name} exited early ({c.proc.returncode}):\n{c.tail()}")
        return out

    # ---- messages ----

    def insert(self, count: int, lead_s: float, span_s: float = 0.0) -> list[str]:
        """``count`` one-offs due from now+``lead_s`` over ``span_s`` seconds, categories
        round-robin, each to its own recipient; returns their ids."""
        if self._next + count > self.recipients:
            raise ValueError("more messages than seeded recipients")
        t0 = datetime.now(UTC) + timedelta(seconds=lead_s)
        step = span_s / count if count else 0.0
        instants = [
            (t0 + timedelta(seconds=k * step), seed.CATEGORIES[(self._next + k) % 7])
            for k in range(count)
        ]
        pairs = seed.due_messages(instants, first=self._next)
        self._next += count
        created = asyncio.run(seed.insert_messages(self.store.url, [m for m, _ in pairs]))
        if created != count:
            raise RuntimeError(f"inserted {created} of {count}")
        for _, d in pairs:
            self.due[d.id] = d
        return [d.id for _, d in pairs]

    def statuses(self, ids: Sequence[str] | None = None) -> dict[str, str]:
        wanted = None if ids is None else set(ids)
        return {
            i: m.status for i, m in self.store.messages().items() if wanted is None or i in wanted
        }

    def unpublished(self) -> int:
        return sum(
            1 for m in self.store.messages().values() if m.publish_pending and m.status == "pending"
        )

    def received_ids(self) -> set[str]:
        return {
            str((r.get("data") or {}).get("tepat_message_id", ""))
            for r in self.sandbox.received()
            if r.get("status") == "ok"
        }

    def wait_terminal(self, timeout: float) -> float:
        """Until no message is pending or sending, at most ``timeout`` s; returns the wait."""
        started = time.monotonic()
        deadline = started + timeout
        while (left := sum(s in ("pending", "sending") for s in self.statuses().values())) > 0:
            if self.died():
                break
            if time.monotonic() > deadline:
                log(f"{left} messages still pending/sending after {timeout:.0f}s")
                break
            time.sleep(0.25)
        return time.monotonic() - started

    # ---- the broker's side ----

    def dead_letters(self) -> int:
        if self.broker is None:
            try:
                return int(json.loads(self.stats_path.read_text())["dead_letters"])
            except (OSError, ValueError, KeyError):
                return 0
        return asyncio.run(_stomp_dead_letters(self.broker.url, self.cfg.categories().queues()))

    def redriven(self) -> int:
        """Messages the sweeper re-drove, summed from every process's log."""
        total = 0
        for c in [*self.dead, *self.consumers, *([self.scheduler] if self.scheduler else [])]:
            for line in c.log_text().splitlines():
                if "re-driving messages" in line and line.startswith("{"):
                    try:
                        total += int(json.loads(line).get("count", 0))
                    except ValueError:
                        continue
        return total


async def _stomp_dead_letters(url: str, queues: Sequence[str]) -> int:
    broker = StompBroker(url)
    await broker.connect()
    try:
        return len(await broker.dead_letters(queues))
    finally:
        await broker.close()


def wait_for(what: str, cond: Any, timeout: float, poll: float = 0.02) -> bool:
    """Poll ``cond()`` until true; False (and a log line) after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(poll)
    log(f"gave up waiting for {what} after {timeout:.0f}s")
    return False


@contextmanager
def rig(
    workdir: Path,
    broker: ActiveMQ | None,
    queue_prefix: str,
    recipients: int,
    timing: Timing,
    store: str = "sqlite",
    fallback: Callable[[int], str | None] = lambda i: None,
) -> Iterator[Rig]:
    """Seed ``recipients`` (one user and device each, ``fallback`` as
    :func:`seed.seed_recipients` takes it) in a fresh ``store``, start the sandbox; stop
    everything at the end (SIGTERM: a clean drain)."""
    workdir.mkdir(parents=True, exist_ok=True)
    with chaos_store(store, workdir) as db, running_sandbox(workdir, None) as sandbox:
        asyncio.run(seed.seed_recipients(db.url, recipients, fallback=fallback))
        cfg = Config(
            db_path=workdir / "tepat.db",
            broker_url=broker.url if broker else "embedded://",
            queue_prefix=queue_prefix,
            expo_url=sandbox.url,
            database_url=db.url,
        )
        r = Rig(workdir, db, broker, sandbox, cfg, timing, recipients)
        try:
            yield r
        finally:
            r.stop_all()
