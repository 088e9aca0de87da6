"""ActiveMQ for the bench: the broker named by ``--stomp-url`` / ``TEPAT_TEST_STOMP_URL``, or one
started with ``scripts/activemq.sh`` in a temporary base directory (and stopped afterwards).
"""

from __future__ import annotations

import os
import queue
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import stomp

from bench.procs import free_port
from bench.report import ROOT, log
from tepat.adapters.stomp import parse_stomp_url
from tepat.domain.batches import decode_batch

SCRIPT = ROOT / "scripts" / "activemq.sh"
SCHEDULER = "/topic/ActiveMQ.Scheduler.Management"


@dataclass(frozen=True)
class ActiveMQ:
    url: str
    owned: bool  # started by the bench: it may clear the whole scheduler
    # A broker the bench started: its base directory and the environment of
    # scripts/activemq.sh (the ports), so that it can be restarted (chaos).
    base: Path | None = None
    env: dict[str, str] = field(default_factory=dict, compare=False)


def restart(broker: ActiveMQ) -> float:
    """``scripts/activemq.sh restart BASE`` (a clean stop, then a start that waits for
    STOMP); returns the seconds it took. Only a broker the bench started."""
    if broker.base is None:
        raise ValueError("only a broker the bench started can be restarted")
    started = time.monotonic()
    subprocess.run(
        ["bash", str(SCRIPT), "restart", str(broker.base)],
        check=True,
        env=broker.env,
        stdout=sys.stderr,
    )
    return time.monotonic() - started


@contextmanager
def activemq(stomp_url: str | None, workdir: Path, *, own: bool = False) -> Iterator[ActiveMQ]:
    """The named broker, else one started here; ``own``: always start one (chaos restarts it)."""
    url = None if own else stomp_url or os.environ.get("TEPAT_TEST_STOMP_URL", "").strip() or None
    if url:
        log(f"using the ActiveMQ broker at {url}")
        yield ActiveMQ(url, owned=False)
        return
    base = workdir / "activemq"
    stomp_port, openwire_port = free_port(), free_port()
    env = {
        **os.environ,
        "TEPAT_AMQ_STOMP_PORT": str(stomp_port),
        "TEPAT_AMQ_OPENWIRE_PORT": str(openwire_port),
        "AMQ_HEAP": os.environ.get("AMQ_HEAP", "512m"),
    }
    log(f"starting ActiveMQ in {base} (stomp port {stomp_port})")
    subprocess.run(["bash", str(SCRIPT), "install"], check=True, env=env, stdout=subprocess.DEVNULL)
    subprocess.run(
        ["bash", str(SCRIPT), "start", str(base)], check=True, env=env, stdout=sys.stderr
    )
    try:
        yield ActiveMQ(f"stomp://127.0.0.1:{stomp_port}", owned=True, base=base, env=env)
    finally:
        subprocess.run(
            ["bash", str(SCRIPT), "stop", str(base)], check=False, env=env, stdout=sys.stderr
        )


class _Collector(stomp.ConnectionListener):  # type: ignore[misc]
    def __init__(self) -> None:
        self.frames: queue.Queue[Any] = queue.Queue()
        self.receipts: dict[str, threading.Event] = {}

    def on_message(self, frame: Any) -> None:
        self.frames.put(frame)

    def on_receipt(self, frame: Any) -> None:
        event = self.receipts.get(frame.headers.get("receipt-id", ""))
        if event is not None:
            event.set()


class _Admin:
    """A plain synchronous STOMP connection for the scheduler's management actions."""

    def __init__(self, broker: ActiveMQ, timeout: float = 300.0) -> None:
        target = parse_stomp_url(broker.url)
        self.timeout = timeout
        self.collector = _Collector()
        self.conn = stomp.Connection12([(target.host, target.port)], auto_decode=False)
        self.conn.set_listener("bench", self.collector)
        self.conn.connect(target.user, target.password, wait=True)
        self.reply_to = f"/temp-queue/bench-{uuid.uuid4().hex}"
        self.conn.subscribe(self.reply_to, id="inbox", ack="auto")

    def request(self, destination: str, headers: dict[str, str]) -> None:
        receipt = uuid.uuid4().hex
        done = self.collector.receipts[receipt] = threading.Event()
        self.conn.send(destination, b"", headers=headers, receipt=receipt)
        if not done.wait(self.timeout):
            raise TimeoutError(f"no receipt from ActiveMQ for {headers}")

    def browse(self, queue_prefix: str) -> list[tuple[str, bytes]]:
        """(job id, body) of every scheduled job bound for a ``queue_prefix*`` queue."""
        marker = uuid.uuid4().hex
        self.request(SCHEDULER, {"AMQ_SCHEDULER_ACTION": "BROWSE", "reply-to": self.reply_to})
        # the receipt comes after every job was put on the reply queue; the marker after them
        self.request(self.reply_to, {"bench_marker": marker})
        jobs: list[tuple[str, bytes]] = []
        while True:
            frame = self.collector.frames.get(timeout=self.timeout)
            if frame.headers.get("bench_marker") == marker:
                return jobs
            dest = str(frame.headers.get("original-destination", ""))
            job = frame.headers.get("scheduledJobId")
            if dest.startswith(f"/queue/{queue_prefix}") and job:
                body = frame.body if isinstance(frame.body, bytes) else str(frame.body).encode()
                jobs.append((str(job), body))

    def close(self) -> None:
        self.conn.disconnect()


def scheduled_ids(broker: ActiveMQ, queue_prefix: str) -> tuple[int, int, int]:
    """Scheduled jobs on ``queue_prefix*`` queues: (jobs, message ids, distinct message ids)."""
    admin = _Admin(broker)
    try:
        jobs = admin.browse(queue_prefix)
    finally:
        admin.close()
    ids: list[str] = []
    for _, body in jobs:
        ids.extend(decode_batch("?", body).ids)
    return len(jobs), len(ids), len(set(ids))


def remove_scheduled_jobs(broker: ActiveMQ, queue_prefix: str) -> int:
    """Delete the not-yet-due jobs this run left on ``queue_prefix*`` queues; returns how many
    (-1: everything, on a broker the bench started).

    A plan puts 48 hours of batches in the broker's scheduler. Left there, they would
    fire into queues nobody reads and slow every scheduler BROWSE (``stats``) of whoever
    shares the broker.
    """
    admin = _Admin(broker)
    try:
        if broker.owned:
            admin.request(SCHEDULER, {"AMQ_SCHEDULER_ACTION": "REMOVEALL"})
            return -1
        jobs = admin.browse(queue_prefix)
        for job, _ in jobs:
            admin.conn.send(
                SCHEDULER, b"", headers={"AMQ_SCHEDULER_ACTION": "REMOVE", "scheduledJobId": job}
            )
        # frames are handled in order: this receipt means every REMOVE was done
        admin.request(admin.reply_to, {"bench_flush": "1"})
        return len(jobs)
    finally:
        admin.close()
