"""``python -m bench slowclients``: how fast ``/healthz`` answers while slow clients
hold connections, and how much the log grows meanwhile (issue 19: within 1 s, a few
lines a second at most).

A real ``tepat serve`` (embedded defaults) and N clients that each send a partial
request, then one byte every half second (slowloris), until the server closes them at
its header timeout (``TEPAT_HTTP_HEADER_TIMEOUT_SECONDS``; tepat/http_server.py).
Meanwhile one client asks ``/healthz`` every 100 ms. Figures: ``/healthz`` p50, p99
and slowest; log lines per second; how long the slow clients were held. Checks: every
slow client closed by the server, every ``/healthz`` answered 200.
``tests/ops/test_slow_clients.py`` runs :func:`run` with the bound a busy CI machine keeps.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

from bench.procs import Child, child_env, free_port, tepat_argv
from bench.register import wait_ready
from bench.report import Result, emit, log

ADMIN_KEY = "bench-slow-clients-admin-key-0123456789"
CLIENTS = 300
GOAL_HEALTHZ_SECONDS = 1.0
GOAL_LOG_LINES_PER_SECOND = 3.0
PROBE_EVERY = 0.1
DRIP_EVERY = 0.5


@dataclass(frozen=True)
class Measured:
    clients: int
    closed: int
    probes: int
    failed_probes: int
    healthz_seconds: tuple[float, ...]  # sorted
    held_seconds: float

    @property
    def slowest(self) -> float:
        return self.healthz_seconds[-1] if self.healthz_seconds else float("inf")

    def quantile(self, q: float) -> float:
        s = self.healthz_seconds
        return s[min(len(s) - 1, int(q * len(s)))] if s else float("inf")


async def slow_client(port: int, closed: list[int], drip: asyncio.Event) -> None:
    """Sends a partial request, then one byte each time ``drip`` is set, until closed."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(b"POST /v1/events HTTP/1.1\r\nHost: tepat\r\nX-Slow: ")
        await writer.drain()
        while True:
            read = asyncio.ensure_future(reader.read(1))
            tick = asyncio.ensure_future(drip.wait())
            done, _ = await asyncio.wait({read, tick}, return_when=asyncio.FIRST_COMPLETED)
            tick.cancel()
            if read in done:
                read.result()  # b"" (closed) or an answer: either way the server ended it
                closed.append(1)
                return
            read.cancel()
            writer.write(b"a")
            await writer.drain()
    except OSError:
        closed.append(1)
    finally:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()


async def measure(port: int, clients: int, give_up_after: float, answer_within: float) -> Measured:
    """Hold ``clients`` slow clients and probe ``/healthz`` until the server closed them
    all (or ``give_up_after`` seconds); a probe slower than ``answer_within`` fails."""
    closed: list[int] = []
    drip = asyncio.Event()
    started = time.monotonic()
    held = [asyncio.create_task(slow_client(port, closed, drip)) for _ in range(clients)]
    answers: list[float] = []
    failed = 0
    last_drip = 0.0
    async with httpx.AsyncClient(timeout=answer_within) as client:
        while len(closed) < clients and time.monotonic() - started < give_up_after:
            if time.monotonic() - last_drip >= DRIP_EVERY:  # every slow client: a byte more
                last_drip = time.monotonic()
                drip.set()
                drip.clear()
            asked = time.monotonic()
            try:
                ok = (await client.get(f"http://127.0.0.1:{port}/healthz")).status_code == 200
            except httpx.HTTPError:
                ok = False
            answers.append(time.monotonic() - asked)
            failed += not ok
            # pacing the probes of a benchmark (tests wait on conditions; this measures)
            await asyncio.sleep(PROBE_EVERY)
    held_for = time.monotonic() - started
    for task in held:
        task.cancel()
    await asyncio.gather(*held, return_exceptions=True)
    return Measured(clients, len(closed), len(answers), failed, tuple(sorted(answers)), held_for)


def run(clients: int, header_timeout: float, workdir: Path) -> Result:
    port = free_port()
    env = child_env(
        {
            "TEPAT_DATABASE_URL": f"sqlite:///{workdir}/tepat.db",
            "TEPAT_ADMIN_API_KEY": ADMIN_KEY,
            "TEPAT_HTTP_HEADER_TIMEOUT_SECONDS": str(header_timeout),
            "TEPAT_METRICS_PORT": "0",
            "TEPAT_LOG_LEVEL": "INFO",
        }
    )
    server = Child("serve", tepat_argv("serve", "--port", str(port)), env, workdir / "serve.log")
    try:
        wait_ready(port, 1, server)
        lines_before = len(server.log_text().splitlines())
        log(f"slowclients: {clients} slow clients, header timeout {header_timeout:g} s")
        m = asyncio.run(measure(port, clients, header_timeout + 60, answer_within=10.0))
        lines = len(server.log_text().splitlines()) - lines_before
    finally:
        server.stop()
    per_second = lines / max(m.held_seconds, 1.0)
    log(f"slowclients: /healthz slowest {m.slowest * 1000:.0f} ms, {per_second:.1f} log lines/s")
    return Result(
        scenario="slowclients",
        backend="embedded",
        parameters={"slow_clients": clients, "header_timeout_s": header_timeout},
        figures={
            "healthz_p50_ms": round(m.quantile(0.5) * 1000, 1),
            "healthz_p99_ms": round(m.quantile(0.99) * 1000, 1),
            "healthz_max_ms": round(m.slowest * 1000, 1),
            "probes": m.probes,
            "held_s": round(m.held_seconds, 1),
            "log_lines": lines,
            "log_lines_per_s": round(per_second, 2),
        },
        goals={
            "healthz_within_1s": m.slowest <= GOAL_HEALTHZ_SECONDS,
            "log_few_lines_per_s": per_second <= GOAL_LOG_LINES_PER_SECOND,
        },
        correctness=None,
        checks={
            "every_slow_client_closed": m.closed == clients,
            "every_healthz_answered": m.failed_probes == 0,
        },
    )


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m bench slowclients", description=__doc__)
    p.add_argument("--clients", type=int, default=CLIENTS)
    p.add_argument(
        "--header-timeout",
        type=float,
        default=10.0,
        help="TEPAT_HTTP_HEADER_TIMEOUT_SECONDS (default 10, the setting's; quick: 2)",
    )
    p.add_argument("--quick", action="store_true", help="header timeout 2 s")
    p.add_argument("--json", action="store_true", help="one JSON object, last line")
    args = p.parse_args(argv)
    header_timeout = 2.0 if args.quick else args.header_timeout
    with tempfile.TemporaryDirectory(prefix="tepat-slowclients-") as workdir:
        result = run(args.clients, header_timeout, Path(workdir))
    emit(result, args.json)
    return 0 if result.ok else 1
