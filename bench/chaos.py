"""``python -m bench chaos``: faults against real processes; per fault kind, what was lost,
duplicated and stuck (see ``bench/README.md``, section "chaos").

Fault kinds (each on a rig of its own, :mod:`bench.chaos_rig`):

* ``kill_consumer``: SIGKILL a consumer at each step boundary, approximated by gates
  (there are no hooks in production code): *after claim* (a client limited to 20
  notifications/s holds claimed batches in its rate limiter), *after the provider
  accepted, before record* (the sandbox stalls one answer; the kill comes while the
  consumer waits for it), *after record, before ack* (the kill as soon as the store
  shows a ``sent``). A new consumer is started after each kill; the sweeper re-drives
  what was left ``sending`` after its (short) lease.
* ``broker_restart`` (ActiveMQ only): a backlog of due batches in the broker, a consumer
  starting, and ``scripts/activemq.sh restart`` while it subscribes (and, full run, again
  mid-drain).
* ``store_outage``: another process holds ``BEGIN EXCLUSIVE`` on the SQLite file for 60 s
  (quick: 8 s) while messages fall due: every write waits, then fails, then succeeds.
* ``store_restart`` (``--store mongo`` only): messages falling due over a span, the
  run's own wire server SIGKILLed 1 s in and, a few seconds later, restarted on the
  same port with its storage (``scripts/mongo-wire.sh restart``).
* ``provider_429``, ``provider_5xx``, ``provider_lost_answers`` (``provider_storms``): the
  sandbox refuses with 429 (then rate-limits), answers 503 before accepting, or accepts
  and loses the answer (stall until the client's timeout, dropped connection, 5xx).
* ``provider_down``: Expo down for 60 s (quick: 8 s) with FCM fallback tokens on nine
  devices in ten: failover (:mod:`bench.chaos_failover`).
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from bench.activemq import ActiveMQ, restart
from bench.chaos_failover import run_provider_down
from bench.chaos_rig import Rig, Timing, rig, wait_for
from bench.chaos_tally import ChaosCorrectness, tally
from bench.procs import Child, child_env
from bench.report import Result, log

FAULTS = (
    "kill_consumer",
    "broker_restart",
    "store_outage",
    "store_restart",
    "provider_429",
    "provider_5xx",
    "provider_lost_answers",
    "provider_down",
)
STORMS = ("provider_429", "provider_5xx", "provider_lost_answers")
# The faults of one store only (the lock is SQLite's, the server MongoDB's); the others
# run on either.
STORE_OF = {"store_outage": "sqlite", "store_restart": "mongo"}
SENT = ("sent", "delivered")


@dataclass(frozen=True)
class ChaosSizes:
    kill_rounds: int  # each round kills at the three boundaries
    kill_cohort: int  # messages inserted before each kill
    backlog: int  # broker_restart
    restarts: int
    outage_messages: int
    outage_s: float
    outage_span_s: float  # messages fall due over this span, the outage starting 1 s in
    storm_messages: int
    storm_s: float
    lost_answers: int  # per kind of lost answer (stall, drop, error)
    restart_messages: int  # store_restart: due over restart_span_s, the first kill 1 s in
    restart_span_s: float
    # per kill, from the SIGKILL to the restart's start (the server then answers ~5 s
    # later); the next kill 2 s after it answered. Over 30 s, Tepat's operations give
    # up (timeoutMS) instead of waiting it out.
    restart_downs: tuple[float, ...]
    down_messages: int  # provider_down: due over down_s + 5 s
    down_s: float


FULL = ChaosSizes(
    3, 400, 5000, 2, 2000, 60.0, 20.0, 1400, 15.0, 5, 600, 60.0, (5.0, 35.0), 1500, 60.0
)
QUICK = ChaosSizes(1, 150, 1000, 1, 300, 8.0, 4.0, 350, 4.0, 2, 300, 6.0, (2.0,), 300, 8.0)


def result_of(
    fault: str,
    r: Rig,
    ids: Sequence[str],
    parameters: dict[str, Any],
    figures: dict[str, Any],
    notes: list[str],
    checks: dict[str, bool] | None = None,
    received: list[dict[str, Any]] | None = None,
) -> Result:
    """``received``: every copy the providers accepted (default: the Expo sandbox's)."""
    received = r.sandbox.received() if received is None else received
    # kept with the logs (--keep): the evidence behind a failure's figures
    (r.workdir / f"{fault}-received.json").write_text(json.dumps(received))
    correctness = tally(
        r.store,
        {i: r.due[i].category for i in ids},
        received,
        r.cfg.categories(),
        r.kills,
        known=r.due.keys(),
    )
    figures = {
        **figures,
        "sweeper_redriven": r.redriven(),
        "dead_letters": r.dead_letters(),
        "lateness_s": _lateness(r, ids, received),
    }
    all_checks = {
        "no_process_died_unasked": not r.exited_early,
        **(checks or {}),
    }
    return Result(
        scenario="chaos",
        backend="embedded" if r.embedded else "activemq",
        parameters={"fault": fault, "store": r.store_kind, "messages": len(ids), **parameters},
        figures=figures,
        goals={},
        correctness=correctness,
        checks=all_checks,
        notes=notes,
    )


def _lateness(r: Rig, ids: Sequence[str], received: list[dict[str, Any]]) -> dict[str, float]:
    """First arrival - due instant, over the messages that arrived: p50 and max (seconds)."""
    first: dict[str, datetime] = {}
    for e in received:
        mid = str((e.get("data") or {}).get("tepat_message_id", ""))
        at = datetime.fromisoformat(str(e["received_at"]))
        if e.get("status") == "ok" and (mid not in first or at < first[mid]):
            first[mid] = at
    late = sorted((first[i] - r.due[i].scheduled_at).total_seconds() for i in ids if i in first)
    if not late:
        return {}
    return {"p50": round(late[len(late) // 2], 2), "max": round(late[-1], 2)}


def _consumers(r: Rig, count: int) -> None:
    for _ in range(1 if r.embedded else count):
        r.start_consumer()


def run_kill(
    workdir: Path, broker: ActiveMQ | None, prefix: str, z: ChaosSizes, store: str
) -> Result:
    rounds, cohort = z.kill_rounds, z.kill_cohort
    hits = {"after_claim": 0, "after_accept_before_record": 0, "after_record_before_ack": 0}
    ids: list[str] = []
    with rig(workdir, broker, prefix, rounds * 3 * cohort, Timing(lease_s=6.0), store) as r:
        r.start_scheduler()
        for k in range(rounds):
            log(f"kill_consumer round {k + 1}/{rounds}: after claim")
            ids += r.insert(cohort, lead_s=1.0)
            # A slow client: claimed batches wait in its rate limiter, not yet sent.
            c = r.start_consumer({"TEPAT_EXPO_RATE_LIMIT": "20"})
            wait_for("claimed messages", lambda: "sending" in r.statuses().values(), 30)
            time.sleep(0.3)
            r.kill(c)
            st, got = r.statuses(), r.received_ids()
            hits["after_claim"] += sum(1 for i, s in st.items() if s == "sending" and i not in got)

            log("kill_consumer: after the provider accepted, before record")
            lost_before = r.sandbox.stats()["answers_lost"]
            r.sandbox.script({"after_accept": {"count": 1, "fault": "stall"}})
            ids += r.insert(cohort, lead_s=1.0)
            c = r.start_consumer()
            wait_for(
                "a stalled answer",
                lambda lb=lost_before: r.sandbox.stats()["answers_lost"] > lb,
                30,
            )
            r.kill(c)
            r.sandbox.script({"clear": True})
            st, got = r.statuses(), r.received_ids()
            hits["after_accept_before_record"] += sum(
                1 for i, s in st.items() if s == "sending" and i in got
            )

            log("kill_consumer: after record, before ack")
            fresh = r.insert(cohort, lead_s=1.0)
            ids += fresh
            c = r.start_consumer()
            wait_for(
                "a recorded send",
                lambda f=fresh: any(s in SENT for s in r.statuses(f).values()),
                30,
                poll=0.005,
            )
            r.kill(c)
            hits["after_record_before_ack"] += sum(
                1 for s in r.statuses(fresh).values() if s in SENT
            )
        r.start_consumer()
        waited = r.wait_terminal(r.timing.lease_s + 120 + len(ids) / 50)
        result = result_of(
            "kill_consumer",
            r,
            ids,
            {"rounds": rounds, "cohort": cohort, "lease_s": r.timing.lease_s},
            {"kills": len(r.kills), "killed_holding": hits, "wait_s": round(waited, 1)},
            [
                "killed_holding: messages in that state when the consumer was killed "
                "(store and sandbox read right after the SIGKILL)",
                "window duplicates here: copies accepted by the sandbox whose consumer was "
                "killed before recording them (re-driven after the lease, sent again)",
            ],
        )
    return result


def run_broker_restart(
    workdir: Path, broker: ActiveMQ | None, prefix: str, z: ChaosSizes, store: str
) -> Result:
    if broker is None:
        return Result(
            scenario="chaos",
            backend="embedded",
            parameters={"fault": "broker_restart"},
            figures={"not_applicable": True},
            goals={},
            correctness=None,
            notes=[
                "embedded: the broker lives in the consumer process; restarting it is "
                "kill_consumer (the restarted process refills it from the store)"
            ],
        )
    # A grace longer than the run: a re-drive would mean the broker lost a batch.
    timing = Timing(lease_s=30.0, grace_s=60.0)
    with rig(workdir, broker, prefix, z.backlog, timing, store) as r:
        r.start_scheduler()
        ids = r.insert(z.backlog, lead_s=1.0, span_s=2.0)
        wait_for("the outbox to publish the backlog", lambda: r.unpublished() == 0, 120, 0.2)
        time.sleep(3.5)  # everything due: a backlog waits in the broker
        took = []
        # a slow client keeps the backlog in the broker long enough to restart mid-drain
        c = r.start_consumer({"TEPAT_EXPO_RATE_LIMIT": "300"}, wait=False)
        c.wait_for_line("runtime ready", 120)
        log("broker_restart: restarting ActiveMQ while the consumer subscribes")
        took.append(round(restart(broker), 1))
        for k in range(1, z.restarts):
            target = len(ids) * k // (z.restarts + 1)
            wait_for("part of the backlog", lambda t=target: len(r.received_ids()) >= t, 120, 0.5)
            log(f"broker_restart: restart {k + 1} mid-drain")
            took.append(round(restart(broker), 1))
        waited = r.wait_terminal(timing.grace_s + 180)
        return result_of(
            "broker_restart",
            r,
            ids,
            {"restarts": z.restarts, "sweep_grace_s": timing.grace_s},
            {"restart_seconds": took, "wait_s": round(waited, 1)},
            [
                "the first restart comes as the consumer connects and subscribes with the "
                "backlog waiting; sweeper_redriven > 0 means a batch was lost for longer "
                f"than the {timing.grace_s:.0f} s grace",
            ],
        )


def run_store_outage(workdir: Path, broker: ActiveMQ | None, prefix: str, z: ChaosSizes) -> Result:
    timing = Timing(lease_s=20.0, grace_s=10.0)
    n = z.outage_messages
    with rig(workdir, broker, prefix, n, timing, "sqlite") as r:
        r.start_scheduler()
        _consumers(r, 2)
        ids = r.insert(n, lead_s=2.0, span_s=z.outage_span_s)
        _sleep_until(r.due[ids[0]].scheduled_at + timedelta(seconds=1))
        lock = Child(
            "store-lock",
            [sys.executable, "-m", "bench.store_lock", str(r.cfg.db_path), str(z.outage_s)],
            child_env({}),
            workdir / "store-lock.log",
        )
        lock.wait_for_line("locked", 60)
        log(f"store_outage: the store is locked for {z.outage_s:.0f}s")
        lock.wait_for_line("released", z.outage_s + 60)
        lock.wait(30)
        waited = r.wait_terminal(timing.lease_s + 180 + n / 50)
        dead = r.dead_letters()
        return result_of(
            "store_outage",
            r,
            ids,
            {"outage_s": z.outage_s, "due_span_s": z.outage_span_s},
            {"wait_after_outage_s": round(waited, 1)},
            [
                "the outage: BEGIN EXCLUSIVE held by another process (writes wait their "
                "30 s busy timeout, then fail; reads go on, WAL)",
            ],
            {"none_dead_lettered": dead == 0},
        )


def run_storm(
    workdir: Path, broker: ActiveMQ | None, prefix: str, z: ChaosSizes, fault: str, store: str
) -> Result:
    """One provider storm on a rig of its own: what a storm leaves in the processes (a
    throttled send rate, retries still waiting) must not land on the next storm's count."""
    # The lease outlasts a stalled answer (the client's 15 s timeout): a re-drive while
    # the consumer still waits would be a duplicate the design does not allow.
    timing = Timing(lease_s=30.0, grace_s=10.0)
    n = z.storm_messages
    storms: dict[str, Callable[[Rig], dict[str, Any]]] = {
        "provider_429": lambda r: _timed_storm(r, z.storm_s, {"next_429": 10**6}, 150),
        "provider_5xx": lambda r: _timed_storm(
            r, z.storm_s, {"fail_next": {"count": 10**6, "status": 503}}, None
        ),
        "provider_lost_answers": lambda r: _lost_answers(r, z.lost_answers),
    }
    with rig(workdir, broker, prefix, n, timing, store) as r:
        r.start_scheduler()
        _consumers(r, 2)
        ids = r.insert(n, lead_s=2.0, span_s=z.storm_s)
        log(f"{fault}: {n} messages due over {z.storm_s:.0f}s")
        params = storms[fault](r)
        waited = r.wait_terminal(timing.lease_s + 120 + n / 50)
        return result_of(
            fault,
            r,
            ids,
            params,
            {
                "sandbox": {k: v for k, v in r.sandbox.stats().items() if v},
                "wait_s": round(waited, 1),
            },
            [
                "a lost answer (stall, drop) is maybe-sent: safety retries it (window "
                "duplicates), the other categories close it failed/outcome_unknown; a 5xx "
                "after acceptance is retried for every category (window duplicates)",
            ],
        )


def run_store_restart(workdir: Path, broker: ActiveMQ | None, prefix: str, z: ChaosSizes) -> Result:
    # Down for less than Tepat's timeoutMS (30 s), the store is waited out: operations
    # block, then go on. Longer, they fail: a consumer hands its batch back, the lease
    # re-drives what was claimed. A grace past the outage: no re-drive of a batch that
    # merely waited in the broker.
    timing = Timing(lease_s=20.0, grace_s=30.0)
    n = z.restart_messages
    with rig(workdir, broker, prefix, n, timing, "mongo") as r:
        wire = r.wire
        r.start_scheduler()
        _consumers(r, 2)
        ids = r.insert(n, lead_s=2.0, span_s=z.restart_span_s)
        kill_at = r.due[ids[0]].scheduled_at + timedelta(seconds=1)
        outages = []
        for down in z.restart_downs:
            _sleep_until(kill_at)
            killed = wire.kill()
            arrived = len(r.received_ids() & set(ids))
            time.sleep(down)
            took = wire.restart()
            back = datetime.now(UTC)
            # A copy the provider accepted before the store came back, whose ticket never
            # reached the store, is this kill's window (the record could not be made).
            r.kills.append(back)
            gone = (back - killed).total_seconds()
            log(f"store_restart: the wire server answered again {gone:.1f}s after the kill")
            outages.append(
                {
                    "arrived_before_kill": arrived,
                    "down_s": round(gone, 1),
                    "restart_s": round(took, 1),
                }
            )
            kill_at = back + timedelta(seconds=2)
        waited = r.wait_terminal(timing.lease_s + 180 + n / 50)
        dead = r.dead_letters()
        return result_of(
            "store_restart",
            r,
            ids,
            {"due_span_s": z.restart_span_s, "kills": len(z.restart_downs)},
            {"outages": outages, "wait_after_restart_s": round(waited, 1)},
            [
                "the wire server (SecantusDB, journal synced on commit) SIGKILLed 1 s after "
                "the first message fell due (and again 2 s after each restart), restarted "
                "on the same port with its storage; window duplicates: copies accepted "
                "before it answered again whose ticket never reached the store",
            ],
            {"none_dead_lettered": dead == 0},
        )


def _timed_storm(r: Rig, seconds: float, spec: dict[str, Any], rate: float | None) -> Any:
    """Refuse every request for ``seconds`` (``rate``: then a rate limit as long)."""
    r.sandbox.script({**spec, "retry_after": 1})
    time.sleep(2.0 + seconds)
    r.sandbox.script({"clear": True})
    if rate is not None:
        r.sandbox.script({"rate_limit": rate})
        time.sleep(seconds)
        r.sandbox.script({"rate_limit": None})
    return {"storm_s": seconds, "then_rate_limit": rate}


def _lost_answers(r: Rig, each: int) -> dict[str, Any]:
    for fault in ("stall", "drop", "error"):
        r.sandbox.script({"after_accept": {"count": each, "fault": fault, "status": 502}})
    return {"lost_answers": {"stall": each, "drop": each, "error": each}}


def _sleep_until(at: datetime) -> None:
    time.sleep(max(0.0, (at - datetime.now(UTC)).total_seconds()))


def run_chaos(
    workdir: Path,
    broker: ActiveMQ | None,
    prefix: str,
    sizes: ChaosSizes,
    faults: Sequence[str],
    emit: Callable[[Result], None],
    store: str = "sqlite",
) -> None:
    """Run the wanted fault kinds on ``store`` (sqlite or mongo); ``emit`` each result as
    it comes."""
    for k, fault in enumerate(faults):
        where = workdir / fault
        pre = f"{prefix}f{k}."
        if fault == "kill_consumer":
            emit(run_kill(where, broker, pre, sizes, store))
        elif fault == "broker_restart":
            emit(run_broker_restart(where, broker, pre, sizes, store))
        elif fault == "store_outage":
            emit(run_store_outage(where, broker, pre, sizes))
        elif fault == "store_restart":
            emit(run_store_restart(where, broker, pre, sizes))
        elif fault == "provider_down":
            n, down = sizes.down_messages, sizes.down_s
            emit(run_provider_down(where, broker, pre, n, down, store))
        else:
            emit(run_storm(where, broker, pre, sizes, fault, store))


def summary(results: Sequence[Result]) -> str:
    """The table: per fault kind, lost, duplicated, window duplicates, stuck."""
    head = ("fault", "lost", "duplicated", "window_dup", "stuck", "outcome_unknown", "ok")
    rows = [head]
    for res in results:
        c = res.correctness
        fault = str(res.parameters.get("fault"))
        if not isinstance(c, ChaosCorrectness):
            rows.append((fault, "-", "-", "-", "-", "-", "n/a"))
            continue
        rows.append(
            (
                fault,
                str(c.lost),
                str(c.duplicates),
                str(c.window_duplicates),
                str(c.stuck),
                str(c.closed_outcome_unknown),
                "OK" if res.ok else "FAILED",
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(head))]
    return "\n".join(
        "  ".join(v.rjust(w) for v, w in zip(row, widths, strict=True)) for row in rows
    )
