"""One end-to-end delivery run: due messages in the store, consumers, the sandbox, the tally.

Shared by the dispatch, ratelimited, lateness and burst scenarios. The steps:

1. seed one user with one device per message (not timed);
2. start the sandbox process of the devices' provider (Expo's, FCM's or APNs's);
3. ActiveMQ: start ``tepat consumers`` processes, then insert the messages due at
   ``t0`` and publish their batches from here (what the creator job does);
   embedded: insert the messages, then start one consumer-host process, which
   re-enqueues the store's pending messages into its in-process broker on start;
4. wait until no message is ``pending`` or ``sending``;
5. tally: the store's statuses, the sandbox's log of every notification received
   (per message id and per token: duplicates, lost), the sandbox's counters, then
   SIGTERM the consumers (a clean drain) and read their peak RSS.
"""

from __future__ import annotations

import asyncio
import math
import sys
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from bench import push_kinds, seed, store_view
from bench.config import Config
from bench.cpu_use import CpuMeter, CpuWindow, activemq_pid
from bench.procs import Child, Exited, child_env, tepat_argv
from bench.report import Correctness, log
from bench.sandbox import running_sandbox
from tepat.adapters.namespaced_broker import NamespacedBroker
from tepat.adapters.stomp import StompBroker
from tepat.clock import SystemClock
from tepat.config import Settings
from tepat.ports.broker import Broker
from tepat.services.enqueue import Enqueuer

READY_EMBEDDED = "embedded queue restored from the store"
READY_CONSUMER = "runtime ready"


@dataclass
class Plan:
    """What to deliver: (offset from t0 in seconds, category) per message."""

    items: Sequence[tuple[float, str]]
    consumers: int = 1
    sandbox_rate_limit: float | None = None  # None: unlimited
    client_rate_limit: float | None = None  # None: Tepat's default (600/s)
    provider: str = "expo"  # the devices' kind, its sandbox (bench/push_kinds.py)
    env: tuple[tuple[str, str], ...] = ()  # more TEPAT_* for the consumers


@dataclass
class Outcome:
    t0: datetime
    start: datetime  # max(t0, ready): when consuming could begin
    ready_margin_s: float  # t0 - ready; negative: the harness was late
    due: dict[str, seed.Due]
    received: list[dict[str, Any]]
    sandbox_stats: dict[str, int]
    statuses: dict[str, int]
    sent_at: dict[str, datetime]
    consumers: list[Exited]
    correctness: Correctness
    arrivals: dict[str, datetime] = field(default_factory=dict)  # first ok arrival per id
    # CPU of each process from just before the messages reached the broker (ActiveMQ) or
    # the consumer host was ready (embedded) until nothing was left to send
    cpu: CpuWindow | None = None

    @property
    def last_sent(self) -> datetime:
        return max(self.sent_at.values(), default=self.start)

    @property
    def peak_rss_mb(self) -> float:
        return max((c.peak_rss_mb for c in self.consumers), default=0.0)


def lead_seconds(n: int) -> float:
    """How far in the future ``t0`` lies: room to insert, enqueue and start consumers (on a
    busy shared machine 20,000 took up to 12 s)."""
    return 5.0 + n / 2000


# as the outbox of a `tepat` process publishes: with the lead (the consumer holds)
LEAD_SECONDS: float = Settings.model_fields["broker_lead_seconds"].default


def _sleep_until(instant: datetime) -> None:
    time.sleep(max(0.0, (instant - datetime.now(UTC)).total_seconds()))


async def publish(cfg: Config, messages: Sequence[Any], namespace: str = "") -> int:
    """Publish the messages' batches to ActiveMQ (the creator job's part), on an app's
    queues when ``namespace`` is one (tepat/tenancy.py queue_namespace)."""
    clock = SystemClock()
    stomp = StompBroker(cfg.broker_url, clock=clock, lead_seconds=LEAD_SECONDS)
    broker: Broker = NamespacedBroker(stomp, namespace) if namespace else stomp
    await broker.connect()
    try:
        return await Enqueuer(broker, cfg.categories(), clock).enqueue(messages)
    finally:
        await broker.close()


def consumer_argv(embedded: bool) -> list[str]:
    if embedded:
        return [sys.executable, "-m", "bench.consumer_host"]
    return tepat_argv("consumers")


def deliver(workdir: Path, broker_url: str, queue_prefix: str, plan: Plan) -> Outcome:
    embedded = broker_url == "embedded://"
    if embedded and plan.consumers != 1:
        raise ValueError("the embedded broker lives in one process: one consumer process only")
    workdir.mkdir(parents=True, exist_ok=True)
    db = workdir / "tepat.db"
    n = len(plan.items)
    # watched from now on: the broker's rate while this run does not use it is other work
    broker_pid = None if embedded else activemq_pid(broker_url)
    meter = CpuMeter(shared=frozenset({"broker"}))
    meter.watch({"broker": broker_pid} if broker_pid else {})
    log(f"seeding {n} recipients (users + devices) in {db}")
    started = time.monotonic()
    asyncio.run(seed.seed_recipients(db, n, plan.provider))
    log(f"seeded in {time.monotonic() - started:.1f}s")

    with running_sandbox(workdir, plan.sandbox_rate_limit, plan.provider) as sandbox:
        own = push_kinds.consumer_env(plan.provider, sandbox.url, workdir, plan.client_rate_limit)
        cfg = Config(
            db_path=db,
            broker_url=broker_url,
            queue_prefix=queue_prefix,
            expo_url=sandbox.url,
            expo_rate_limit=plan.client_rate_limit,
            provider_env=(*own.items(), *plan.env),
        )
        env = child_env(cfg.env())
        consumers: list[Child] = []
        try:
            if not embedded:
                for k in range(plan.consumers):
                    consumers.append(
                        Child(
                            f"consumer-{k}",
                            consumer_argv(False),
                            env,
                            workdir / f"consumer-{k}.log",
                        )
                    )
                for c in consumers:
                    c.wait_for_line(READY_CONSUMER, 60)
            meter.watch({c.name: c.pid for c in consumers} | {"sandbox": sandbox.child.pid})
            t0 = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=lead_seconds(n))
            pairs = seed.due_messages(
                [(t0 + timedelta(seconds=offset), category) for offset, category in plan.items],
                kind=plan.provider,
            )
            messages = [m for m, _ in pairs]
            inserted = asyncio.run(seed.insert_messages(db, messages))
            if inserted != n:
                raise RuntimeError(f"inserted {inserted} of {n} messages")
            if embedded:
                host = Child("consumer-0", consumer_argv(True), env, workdir / "consumer-0.log")
                consumers.append(host)
                host.wait_for_line(READY_EMBEDDED, 300)
                meter.watch({host.name: host.pid})
            else:
                batches = asyncio.run(publish(cfg, messages))
                log(f"published {batches} broker batches to ActiveMQ")
            ready = datetime.now(UTC)
            margin = (t0 - ready).total_seconds()
            if margin < 0:
                log(f"WARNING: ready {-margin:.2f}s after t0; timing starts when ready")
            # Nothing happens before the broker hands the batches over (the lead before t0):
            # the CPU window starts there, so that its cores are the drain's.
            _sleep_until(t0 - timedelta(seconds=LEAD_SECONDS))
            # ready after the hand-over: the consumers were at work before the window
            meter.start(quiet_before=margin >= LEAD_SECONDS)
            start = max(t0, ready)
            last_offset = max((o for o, _ in plan.items), default=0.0)
            # a limited sandbox drains no faster than its limit: leave 3x that (a bound,
            # not a goal; the stall check still ends a run that makes no progress)
            drain = 3 * n / plan.sandbox_rate_limit if plan.sandbox_rate_limit else 0.0
            # n / 20: a consumer on a crowded machine (FCM, APNs: a request each) may
            # manage little more; the stall check ends a run that has stopped sooner
            budget = max(0.0, margin) + last_offset + 60 + max(n / 20, drain)
            wait_until_finished([db], consumers, budget)
            cpu = meter.stop()
            received = [push_kinds.as_expo_entry(plan.provider, e) for e in sandbox.received()]
            stats = sandbox.stats()
            stats["send_requests"] = push_kinds.send_requests(plan.provider, stats)
            statuses = store_view.status_counts(db)
            sent_at = store_view.sent_times(db)
            tickets = store_view.tickets_per_message(db)
        finally:
            exits = [c.stop(60) for c in consumers]
    for c, e in zip(consumers, exits, strict=True):
        if e.returncode != 0:
            log(f"{c.name} exited with {e.returncode}:\n{c.tail()}")

    due = {d.id: d for _, d in pairs}
    correctness, arrivals = tally(
        due, received, statuses, sent_at, tickets, [e.returncode for e in exits]
    )
    return Outcome(
        t0=t0,
        start=start,
        ready_margin_s=round(margin, 3),
        due=due,
        received=received,
        sandbox_stats=stats,
        statuses=statuses,
        sent_at=sent_at,
        consumers=exits,
        correctness=correctness,
        arrivals=arrivals,
        cpu=cpu,
    )


def tally(
    due: dict[str, seed.Due],
    received: Sequence[dict[str, Any]],
    statuses: dict[str, int],
    sent_at: dict[str, datetime],
    tickets: dict[str, int],
    exit_codes: list[int],
) -> tuple[Correctness, dict[str, datetime]]:
    """Each message of ``due`` received once, none lost, no stranger (a notification of
    no message of ``due``); and the first ok arrival of each."""
    by_id: Counter[str] = Counter()
    by_token: Counter[str] = Counter()
    arrivals: dict[str, datetime] = {}
    for r in received:
        if r.get("status") != "ok":
            continue
        mid = str((r.get("data") or {}).get("tepat_message_id", ""))
        by_id[mid] += 1
        by_token[str(r.get("to"))] += 1
        at = datetime.fromisoformat(str(r["received_at"]))
        if mid not in arrivals or at < arrivals[mid]:
            arrivals[mid] = at
    duplicates = sum(c - 1 for mid, c in by_id.items() if c > 1)
    tokens_twice = sum(1 for c in by_token.values() if c > 1)
    lost = sum(1 for mid in due if by_id[mid] == 0)
    strangers = sum(c for mid, c in by_id.items() if mid not in due)
    sent = sum(1 for mid in due if mid in sent_at)
    correctness = Correctness(
        expected=len(due),
        sent=sent,
        duplicates=duplicates + strangers,
        lost=lost,
        details={
            "statuses": statuses,
            "tokens_received_twice": tokens_twice,
            "tickets_per_message_max": max(tickets.values(), default=0),
            "consumer_exit_codes": exit_codes,
        },
    )
    return correctness, arrivals


STALL_SECONDS = 30.0


def wait_until_finished(dbs: Sequence[Path], consumers: list[Child], timeout: float) -> None:
    """Until nothing is pending or sending in any of ``dbs``; gives up at ``timeout`` or
    after STALL_SECONDS without progress (what is left is then counted as lost, not
    raised: a correctness failure, reported as such)."""
    deadline = time.monotonic() + timeout
    last_left, last_change = -1, time.monotonic()
    while (left := sum(store_view.unfinished(db) for db in dbs)) > 0:
        now = time.monotonic()
        if left != last_left:
            last_left, last_change = left, now
        for c in consumers:
            if not c.alive():
                log(f"{c.name} exited early:\n{c.tail()}")
                return
        if now > deadline:
            log(f"{left} messages still pending/sending at the deadline")
            return
        if now - last_change > STALL_SECONDS and now > deadline - timeout + STALL_SECONDS:
            log(f"{left} messages still pending/sending, no progress for {STALL_SECONDS:.0f}s")
            return
        time.sleep(0.2)


def categories_round_robin(n: int) -> list[str]:
    return [seed.CATEGORIES[i % len(seed.CATEGORIES)] for i in range(n)]


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100)."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = max(1, min(len(ordered), math.ceil(q / 100 * len(ordered))))
    return ordered[rank - 1]
