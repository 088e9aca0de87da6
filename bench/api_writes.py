"""``bench api``: per-item writes through the HTTP API, one case at a time.

``python -m bench api [--backend embedded|activemq] [--users N] [--clients 8]``: one API
process, admin-key auth, ``--clients`` concurrent clients, a keep-alive connection each.
On embedded, ``tepat serve`` over a SQLite file (the API runs inside it: the embedded
broker lives in one process); on activemq, ``tepat api`` over the shared broker and,
when ``$TEPAT_TEST_MONGO_URL`` (or ``--mongo-url``) names a MongoDB-wire server, a
database of the run's own on it (else a SQLite file). Cases, each timed alone:

- ``user_new``: ``PUT /v1/users/{id}`` creating N users (no reminders yet);
- ``user_unchanged``: the same N PUTs again (nothing changes: 200);
- ``device_new``: ``PUT …/devices/phone`` for each user;
- ``reminder_new``: ``PUT …/reminders/water`` for each user (a daily reminder: planned);
- ``reminder_unchanged``: the same N reminder PUTs again (nothing changes);
- ``healthz``: N ``GET /healthz`` (no credentials, no store): the HTTP path's floor.

Each case's requests/s beside the goal, and the API process's CPU ms per request (1000 /
it is requests/s on one free core: the figure that holds on a loaded machine, where
requests/s follows the share of a core the process gets). Checks: every answer had the
case's status; on SQLite, every user, active device and reminder stored, every reminder
planned and nothing cancelled. ``--pid-file F`` writes the API's pid first, so a
profiler (``py-spy record --pid``) can attach while the cases run.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.config import Config, run_prefix
from bench.cpu_use import tree_cpu_seconds
from bench.procs import Child, child_env, free_port, tepat_argv
from bench.register import (
    ADMIN_KEY,
    HEADERS,
    device_body,
    reminder_body,
    stored,
    user_body,
    wait_ready,
)
from bench.report import Result, log

GOAL_PER_SECOND = 1_000
FULL_USERS = 2_000
QUICK_USERS = 300
CLIENTS = 8


class _Connection:
    """One keep-alive HTTP/1.1 connection, each request written whole and its answer read
    by its Content-Length: a fraction of httpx's CPU per request, so on a shared machine
    the client's own cost does not set the rate measured."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader = reader
        self._writer = writer

    @classmethod
    async def open(cls, port: int) -> _Connection:
        return cls(*await asyncio.open_connection("127.0.0.1", port))

    async def request(self, method: str, path: str, body: bytes = b"") -> tuple[int, bytes]:
        head = f"{method} {path} HTTP/1.1\r\nhost: 127.0.0.1\r\n{_AUTH}"
        if body:
            head += f"content-type: application/json\r\ncontent-length: {len(body)}\r\n"
        self._writer.write(head.encode() + b"\r\n" + body)
        lines = (await self._reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
        status = int(lines[0].split(" ", 2)[1])
        length = next(
            int(v) for k, _, v in (h.partition(":") for h in lines[1:]) if k.lower() == _LENGTH
        )
        return status, await self._reader.readexactly(length)

    def close(self) -> None:
        self._writer.close()


_AUTH = "".join(f"{k}: {v}\r\n" for k, v in HEADERS.items())
_LENGTH = "content-length"


async def _case(
    connections: list[_Connection],
    users: int,
    path: Callable[[int], str],
    body: Callable[[int], dict[str, Any]] | None,
    status: int,
    api_pid: int,
) -> dict[str, float]:
    """PUT ``body(i)`` to ``path(i)`` (GET it when ``body`` is None) for every user, one
    connection per client: requests/s, CPU ms per request, and how many answers had
    another status than ``status`` (201 created, 200 unchanged; a device PUT is 200)."""
    todo = iter(range(users))
    wrong: list[str] = []

    async def worker(conn: _Connection) -> None:
        for i in todo:  # one shared iterator: each request is sent once
            if body is None:
                got, text = await conn.request("GET", path(i))
            else:
                got, text = await conn.request("PUT", path(i), json.dumps(body(i)).encode())
            if got != status:
                wrong.append(f"{path(i)}: {got} (want {status}) {text[:200]!r}")

    cpu = tree_cpu_seconds(api_pid)
    started = time.perf_counter()
    await asyncio.gather(*(worker(c) for c in connections))
    seconds = time.perf_counter() - started
    cpu = tree_cpu_seconds(api_pid) - cpu
    if wrong:
        log(f"api: {len(wrong)} unexpected answers, the first: {wrong[0]}")
    return {
        "per_second": round(users / seconds, 1),
        "cpu_ms_per_request": round(cpu / users * 1000, 2),
        "unexpected_answers": len(wrong),
    }


async def run_cases(port: int, users: int, clients: int, pid: int) -> dict[str, dict[str, float]]:
    user = lambda i: f"/v1/users/w{i}"  # noqa: E731
    device = lambda i: f"/v1/users/w{i}/devices/phone"  # noqa: E731
    reminder = lambda i: f"/v1/users/w{i}/reminders/water"  # noqa: E731
    water = lambda i: reminder_body("water", "11:00", "hydration")  # noqa: E731
    conns = [await _Connection.open(port) for _ in range(clients)]
    try:
        return {
            "user_new": await _case(conns, users, user, user_body, 201, pid),
            "user_unchanged": await _case(conns, users, user, user_body, 200, pid),
            "device_new": await _case(
                conns, users, device, lambda i: device_body(f"w{i}"), 200, pid
            ),
            "reminder_new": await _case(conns, users, reminder, water, 201, pid),
            "reminder_unchanged": await _case(conns, users, reminder, water, 200, pid),
            "healthz": await _case(conns, users, lambda i: "/healthz", None, 200, pid),
        }
    finally:
        for c in conns:
            c.close()


def _stored_checks(db_path: Path, users: int) -> dict[str, bool]:
    seen = stored(db_path)
    return {
        "every_user_stored": seen["users"] == users,
        "every_device_active": seen["active_devices"] == users,
        "every_reminder_stored": seen["reminders"] == users,
        "every_reminder_planned": seen["reminders_planned"] == users,
        "nothing_cancelled": seen["cancelled"] == 0,
    }


def run_api(
    where: Path,
    backend: str,
    broker_url: str,
    users: int,
    *,
    clients: int = CLIENTS,
    mongo_url: str | None = None,
    pid_file: Path | None = None,
) -> Result:
    database = f"bench_api_{uuid.uuid4().hex[:10]}"
    on_mongo = backend != "embedded" and bool(mongo_url)
    cfg = Config(
        db_path=where / "api_writes.db",
        broker_url=broker_url,
        queue_prefix=run_prefix(),  # its own queues on a shared broker
        database_url=f"{mongo_url}/{database}" if on_mongo else None,
    )
    port = free_port()
    env = child_env(
        {**cfg.env(), "TEPAT_ADMIN_API_KEY": ADMIN_KEY, "TEPAT_ACCESS_LOG_LEVEL": "WARNING"}
    )
    # `tepat api` alone refuses the embedded broker (its writes would reach no consumer)
    command = "serve" if backend == "embedded" else "api"
    store = f"MongoDB wire ({mongo_url}, database {database})" if on_mongo else "SQLite"
    log(f"api: tepat {command} on {store}, {clients} clients, {users} users per case")
    api = Child(command, tepat_argv(command, "--port", str(port)), env, where / "api.log")
    try:
        wait_ready(port, 1, api)
        if pid_file is not None:
            pid_file.write_text(str(api.pid))
        cases = asyncio.run(run_cases(port, users, clients, api.pid))
    finally:
        exited = api.stop()
        if on_mongo:
            _drop(f"{mongo_url}", database)
    checks = {
        f"{name}_answers_as_expected": not c["unexpected_answers"] for name, c in cases.items()
    }
    checks["api_exited_cleanly"] = exited.returncode == 0
    if not on_mongo:
        checks.update(_stored_checks(cfg.db_path, users))
    return Result(
        scenario="api",
        backend=backend,
        parameters={"users": users, "clients": clients, "store": "mongo" if on_mongo else "sqlite"},
        figures=cases,
        goals={
            f"{name}_per_second>={GOAL_PER_SECOND}": c["per_second"] >= GOAL_PER_SECOND
            for name, c in cases.items()
        },
        correctness=None,
        checks=checks,
        notes=[] if on_mongo or backend == "embedded" else ["no Mongo URL given: SQLite"],
    )


def _drop(mongo_url: str, database: str) -> None:
    """The run's own database goes when the run does (the server is shared)."""
    import pymongo

    client: pymongo.MongoClient[Any] = pymongo.MongoClient(mongo_url, serverSelectionTimeoutMS=5000)
    try:
        client.drop_database(database)
    finally:
        client.close()
