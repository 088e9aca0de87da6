"""Per-item writes through the HTTP API, one case at a time: requests/s per case.

``python -m bench.api_writes [--users N] [--clients 8] [--keep DIR]``: one ``tepat serve``
on embedded SQLite (the API runs inside it: the embedded broker lives in one process),
admin-key auth, ``--clients`` concurrent httpx clients. Cases, each timed alone:

- ``user_new``: ``PUT /v1/users/{id}`` creating N users (no reminders yet);
- ``user_unchanged``: the same N PUTs again (nothing changes: 200);
- ``device_new``: ``PUT …/devices/phone`` for each user;
- ``reminder_new``: ``PUT …/reminders/water`` for each user (a daily reminder: planned);
- ``reminder_unchanged``: the same N reminder PUTs again (nothing changes);
- ``healthz``: N ``GET /healthz`` (no credentials, no store): the HTTP path's floor.

Prints one JSON object; ``--pid-file`` writes the serve process's pid first, so a
profiler (``py-spy record --pid``) can attach while the cases run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from bench.config import Config, run_prefix
from bench.cpu_use import tree_cpu_seconds
from bench.procs import Child, child_env, free_port, tepat_argv
from bench.register import ADMIN_KEY, HEADERS, device_body, reminder_body, user_body, wait_ready

GOAL_PER_SECOND = 1_000


async def _case(
    client: httpx.AsyncClient,
    clients: int,
    users: int,
    path: Callable[[int], str],
    body: Callable[[int], dict[str, Any]] | None,
    status: int,
    api_pid: int,
) -> dict[str, float]:
    """PUT ``body(i)`` to ``path(i)`` (GET it when ``body`` is None) for every user,
    ``clients`` at a time: requests/s, and the API process's CPU ms per request (1000 /
    it is requests/s on one free core: the figure that holds on a loaded machine, where
    requests/s follows the share of a core the process gets). Every answer must have
    ``status`` (201 created, 200 unchanged; a device PUT is 200)."""
    todo = iter(range(users))

    async def worker() -> None:
        for i in todo:  # one shared iterator: each request is sent once
            if body is None:
                r = await client.get(path(i))
            else:
                r = await client.put(path(i), json=body(i), headers=HEADERS)
            if r.status_code != status:
                raise RuntimeError(f"PUT {path(i)}: {r.status_code} (want {status}) {r.text}")

    cpu = tree_cpu_seconds(api_pid)
    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(clients)))
    seconds = time.perf_counter() - started
    cpu = tree_cpu_seconds(api_pid) - cpu
    return {
        "per_second": round(users / seconds, 1),
        "cpu_ms_per_request": round(cpu / users * 1000, 2),
    }


async def run_cases(port: int, users: int, clients: int, pid: int) -> dict[str, Any]:
    user = lambda i: f"/v1/users/w{i}"  # noqa: E731
    device = lambda i: f"/v1/users/w{i}/devices/phone"  # noqa: E731
    reminder = lambda i: f"/v1/users/w{i}/reminders/water"  # noqa: E731
    water = lambda i: reminder_body("water", "11:00", "hydration")  # noqa: E731
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(
        base_url=f"http://127.0.0.1:{port}", limits=limits, timeout=120
    ) as client:
        return {
            "user_new": await _case(client, clients, users, user, user_body, 201, pid),
            "user_unchanged": await _case(client, clients, users, user, user_body, 200, pid),
            "device_new": await _case(
                client, clients, users, device, lambda i: device_body(f"w{i}"), 200, pid
            ),
            "reminder_new": await _case(client, clients, users, reminder, water, 201, pid),
            "reminder_unchanged": await _case(client, clients, users, reminder, water, 200, pid),
            "healthz": await _case(client, clients, users, lambda i: "/healthz", None, 200, pid),
        }


def run(where: Path, users: int, clients: int, pid_file: Path | None) -> dict[str, Any]:
    cfg = Config(
        db_path=where / "api_writes.db", broker_url="embedded://", queue_prefix=run_prefix()
    )
    port = free_port()
    env = child_env(
        {**cfg.env(), "TEPAT_ADMIN_API_KEY": ADMIN_KEY, "TEPAT_ACCESS_LOG_LEVEL": "WARNING"}
    )
    api = Child("serve", tepat_argv("serve", "--port", str(port)), env, where / "serve.log")
    try:
        wait_ready(port, 1, api)
        if pid_file is not None:
            pid_file.write_text(str(api.pid))
        per_second = asyncio.run(run_cases(port, users, clients, api.pid))
    finally:
        exited = api.stop()
    return {
        "users": users,
        "clients": clients,
        "cases": per_second,
        "goal_per_second": GOAL_PER_SECOND,
        "serve_exited_cleanly": exited.returncode == 0,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", type=int, default=2_000)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--keep", type=Path, help="work directory to keep (default: a temp one)")
    parser.add_argument("--pid-file", type=Path, help="write the serve process's pid here")
    args = parser.parse_args()
    if args.keep:
        args.keep.mkdir(parents=True, exist_ok=True)
        print(json.dumps(run(args.keep, args.users, args.clients, args.pid_file)))
        return
    with tempfile.TemporaryDirectory(prefix="tepat-api-writes-") as tmp:
        print(json.dumps(run(Path(tmp), args.users, args.clients, args.pid_file)))


if __name__ == "__main__":
    main()
