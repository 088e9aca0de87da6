"""One deployment serving several apps (issue 23), for ``bench apps``.

The steps, as bench/delivery.py's for one app:

1. start the Expo sandbox, each access token (each app's Expo project) with a limit of its
   own (``--token-rate-limit``);
2. register the apps in the default app's store through the apps service (what
   ``POST /v1/admin/apps`` does), each with its own access token and settings, and seed
   each app's recipients in its own store (``tepat.app-<id>.db``), numbered apart so that
   a token or a message id names one app's message;
3. ActiveMQ: start one ``tepat consumers`` process, wait until it has opened every app,
   insert each app's messages due from ``t0`` and publish their batches on the app's
   queues (its namespace); embedded: insert them, then start the consumer host, which
   restores each app's pending messages into that app's embedded broker;
4. wait until no message of any app is ``pending`` or ``sending``;
5. read the consumer's ``/metrics`` (the critical reserve's use, by app), the sandbox's
   log and its 429s by access token, then SIGTERM the consumer and tally.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx

from bench import seed, store_view
from bench.config import Config
from bench.delivery import (
    READY_CONSUMER,
    READY_EMBEDDED,
    consumer_argv,
    lead_seconds,
    publish,
    tally,
    wait_until_finished,
)
from bench.procs import Child, Exited, child_env, free_port
from bench.report import Correctness, log
from bench.sandbox import running_sandbox
from tepat.adapters.sqlite import SqliteStore
from tepat.clock import SystemClock
from tepat.config import Settings
from tepat.sandbox.expo import access_token_label
from tepat.services.apps import AppService
from tepat.tenancy import app_database_url, queue_namespace, settings_check
from tepat.wiring import app_repository

APP_OPENED = "app opened"
# The registry is read this often: every app is open a second after the consumer starts.
REFRESH_SECONDS = 1.0
_RESERVE_USED = re.compile(r"^tepat_critical_reserve_used_total\{([^}]*)\}\s+(\S+)$", re.M)


@dataclass(frozen=True)
class AppPlan:
    """One app: its Expo project's access token, its settings beside it (a ceiling, a
    reserve), and its messages, (offset from t0 in seconds, category) each."""

    app_id: str
    access_token: str
    settings: dict[str, Any]
    items: Sequence[tuple[float, str]]
    first: int  # its recipients' numbering (seed.due_messages); apart from other apps'


@dataclass
class AppsOutcome:
    t0: datetime
    ready_margin_s: float
    due: dict[str, dict[str, seed.Due]]  # by app, by message id
    arrivals: dict[str, datetime]  # first ok arrival at the sandbox per message id
    correctness: Correctness
    reserve_used: dict[str, float]  # tepat_critical_reserve_used_total by app
    responses_429: dict[str, int]  # the sandbox's 429s by app (its access token)
    consumer: Exited


def app_db(db: Path, app_id: str) -> Path:
    return Path(app_database_url(f"sqlite:///{db}", app_id).removeprefix("sqlite:///"))


async def _register(db: Path, apps: Sequence[AppPlan], expo_url: str) -> None:
    base = Settings.model_validate({"database_url": f"sqlite:///{db}"})
    store = SqliteStore(str(db))
    await store.open()
    try:
        service = AppService(app_repository(base, store), SystemClock(), settings_check(base))
        for app in apps:
            settings = {"expo_access_token": app.access_token, "expo_url": expo_url}
            await service.create(app.app_id, f"bench {app.app_id}", settings | app.settings)
    finally:
        await store.close()


def _wait_for_count(child: Child, needle: str, count: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while child.log_text().count(needle) < count:
        if not child.alive():
            raise RuntimeError(f"{child.name} exited early:\n{child.tail()}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"{child.name}: {needle!r} not {count}x in {timeout:.0f}s")
        time.sleep(0.05)


def reserve_used(metrics: str) -> dict[str, float]:
    """``tepat_critical_reserve_used_total`` summed over providers, by app."""
    out: dict[str, float] = {}
    for labels, value in _RESERVE_USED.findall(metrics):
        app = dict(re.findall(r'(\w+)="([^"]*)"', labels)).get("app", "")
        out[app] = out.get(app, 0.0) + float(value)
    return out


def deliver_apps(
    workdir: Path,
    broker_url: str,
    queue_prefix: str,
    apps: Sequence[AppPlan],
    token_rate_limit: float,
) -> AppsOutcome:
    embedded = broker_url == "embedded://"
    workdir.mkdir(parents=True, exist_ok=True)
    db = workdir / "tepat.db"
    n = sum(len(a.items) for a in apps)
    with running_sandbox(workdir, None, "expo", token_rate_limit) as sandbox:
        asyncio.run(_register(db, apps, sandbox.url))
        for app in apps:
            asyncio.run(
                seed.seed_recipients(app_db(db, app.app_id), len(app.items), first=app.first)
            )
        metrics_port = free_port()
        cfg = Config(
            db_path=db,
            broker_url=broker_url,
            queue_prefix=queue_prefix,
            expo_url=sandbox.url,
            provider_env=(
                ("TEPAT_METRICS_PORT", str(metrics_port)),
                ("TEPAT_APPS_REFRESH_SECONDS", str(REFRESH_SECONDS)),
            ),
        )
        env = child_env(cfg.env())
        consumer: Child | None = None
        try:
            if not embedded:
                consumer = Child("consumer-0", consumer_argv(False), env, workdir / "c.log")
                consumer.wait_for_line(READY_CONSUMER, 60)
                _wait_for_count(consumer, APP_OPENED, len(apps), 60)
            t0 = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=lead_seconds(n))
            due: dict[str, dict[str, seed.Due]] = {}
            for app in apps:
                pairs = seed.due_messages(
                    [(t0 + timedelta(seconds=o), c) for o, c in app.items], first=app.first
                )
                messages = [m for m, _ in pairs]
                due[app.app_id] = {d.id: d for _, d in pairs}
                inserted = asyncio.run(seed.insert_messages(app_db(db, app.app_id), messages))
                if inserted != len(messages):
                    raise RuntimeError(f"app {app.app_id}: {inserted} of {len(messages)} inserted")
                if not embedded and messages:
                    asyncio.run(publish(cfg, messages, queue_namespace(app.app_id)))
            if embedded:
                consumer = Child("consumer-0", consumer_argv(True), env, workdir / "c.log")
                # the default app's runtime and each app's restore their queues
                _wait_for_count(consumer, READY_EMBEDDED, len(apps) + 1, 300)
            margin = (t0 - datetime.now(UTC)).total_seconds()
            if margin < 0:
                log(f"WARNING: ready {-margin:.2f}s after t0")
            last = max((o for a in apps for o, _ in a.items), default=0.0)
            budget = max(0.0, margin) + last + 60 + 3 * n / token_rate_limit
            dbs = [app_db(db, a.app_id) for a in apps]
            assert consumer is not None
            wait_until_finished(dbs, [consumer], budget)
            metrics = httpx.get(f"http://127.0.0.1:{metrics_port}/metrics", timeout=30).text
            received = sandbox.received()
            refused = sandbox.describe()["too_many_requests_by_token"]
            statuses: dict[str, int] = {}
            sent_at: dict[str, datetime] = {}
            tickets: dict[str, int] = {}
            for path in dbs:
                for status, count in store_view.status_counts(path).items():
                    statuses[status] = statuses.get(status, 0) + count
                sent_at |= store_view.sent_times(path)
                tickets |= store_view.tickets_per_message(path)
        finally:
            exited = consumer.stop(60) if consumer is not None else None
    assert exited is not None and consumer is not None
    if exited.returncode != 0:
        log(f"the consumer exited with {exited.returncode}:\n{consumer.tail()}")
    every = {mid: d for by_id in due.values() for mid, d in by_id.items()}
    correctness, arrivals = tally(every, received, statuses, sent_at, tickets, [exited.returncode])
    return AppsOutcome(
        t0=t0,
        ready_margin_s=round(margin, 3),
        due=due,
        arrivals=arrivals,
        correctness=correctness,
        reserve_used=reserve_used(metrics),
        responses_429={
            a.app_id: int(refused.get(access_token_label(a.access_token), 0)) for a in apps
        },
        consumer=exited,
    )
