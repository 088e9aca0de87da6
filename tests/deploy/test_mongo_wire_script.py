"""scripts/mongo-wire.sh: the wire server's lifecycle, and the patch that makes it answer
a lost upsert race as mongod does (scripts/mongo-wire/README.md).

The lifecycle test needs the server installed (``scripts/mongo-wire.sh install``, which
the test command runs); the race test needs a running one (``TEPAT_TEST_MONGO_URL``).
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
from pathlib import Path

from pymongo import AsyncMongoClient, MongoClient, ReturnDocument

from tests.deploy.compose_file import ROOT
from tests.support.mongo_factory import server_database, wire_server_venv

SCRIPT = ROOT / "scripts/mongo-wire.sh"
VENV = Path(os.environ.get("TEPAT_MONGO_WIRE_VENV", ROOT / ".mongo-wire-venv"))


def run(
    *args: str, venv: Path = VENV, extra: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    env = {"PATH": os.environ["PATH"], "TEPAT_MONGO_WIRE_VENV": str(venv), **(extra or {})}
    return subprocess.run(
        ["bash", str(SCRIPT), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )


def test_start_without_an_install_says_what_to_run(tmp_path: Path) -> None:
    done = run("start", str(tmp_path / "server"), venv=tmp_path / "no-venv")
    assert done.returncode == 1
    assert "run " in done.stderr and "install' first" in done.stderr


def test_start_answers_pings_on_fresh_storage_and_stop_ends_it(tmp_path: Path) -> None:
    wire_server_venv()
    server = tmp_path / "server"
    started = run("start", str(server))
    assert started.returncode == 0, started.stderr
    url = started.stdout.strip().splitlines()[-1]
    pid = int((server / "server.pid").read_text())
    try:
        assert url.startswith("mongodb://127.0.0.1:")
        assert (server / "url").read_text().strip() == url
        client: MongoClient[dict[str, object]] = MongoClient(url, serverSelectionTimeoutMS=5000)
        try:
            assert client.admin.command("ping")["ok"] == 1
            client["kept"]["docs"].insert_one({"_id": 1})
        finally:
            client.close()
        assert run("status", str(server)).returncode == 0
    finally:
        stopped = run("stop", str(server))
    assert stopped.returncode == 0, stopped.stderr
    assert not (server / "server.pid").exists()
    assert not Path(f"/proc/{pid}").exists() or "zombie" in Path(f"/proc/{pid}/status").read_text()
    assert run("status", str(server)).returncode == 3
    # a new start begins on empty storage
    restarted = run("start", str(server))
    assert restarted.returncode == 0, restarted.stderr
    try:
        client = MongoClient(restarted.stdout.strip().splitlines()[-1])
        try:
            assert "kept" not in client.list_database_names()
        finally:
            client.close()
    finally:
        assert run("stop", str(server)).returncode == 0


def test_restart_keeps_the_storage_and_the_port_after_a_stop_and_after_a_kill(
    tmp_path: Path,
) -> None:
    # A database restart, as bench chaos's store_restart makes one: what was acknowledged
    # before is there after, on the same URL. The kill -9 half needs the journal synced
    # on commit (TEPAT_MONGO_WIRE_SYNC=1): without it the last acknowledged writes die
    # with the process (scripts/mongo-wire.sh).
    wire_server_venv()
    server, durable = tmp_path / "server", {"TEPAT_MONGO_WIRE_SYNC": "1"}
    started = run("start", str(server), extra=durable)
    assert started.returncode == 0, started.stderr
    url = started.stdout.strip().splitlines()[-1]
    try:
        write(url, range(0, 500))
        restarted = run("restart", str(server), extra=durable)
        assert restarted.returncode == 0, restarted.stderr
        assert restarted.stdout.strip().splitlines()[-1] == url
        assert ids(url) == set(range(0, 500))
        # each insert acknowledged on its own, the last one just before the SIGKILL
        write(url, range(500, 1000))
        os.kill(int((server / "server.pid").read_text()), signal.SIGKILL)
        again = run("restart", str(server), extra=durable)
        assert again.returncode == 0, again.stderr
        assert again.stdout.strip().splitlines()[-1] == url
        assert ids(url) == set(range(0, 1000))
    finally:
        assert run("stop", str(server)).returncode == 0


def test_restart_refuses_a_folder_no_server_was_started_in(tmp_path: Path) -> None:
    done = run("restart", str(tmp_path))
    assert done.returncode == 1
    assert "restart needs a server started" in done.stderr


def write(url: str, keys: range) -> None:
    client: MongoClient[dict[str, object]] = MongoClient(url, serverSelectionTimeoutMS=5000)
    try:
        for k in keys:
            client["kept"]["docs"].insert_one({"_id": k})
    finally:
        client.close()


def ids(url: str) -> set[object]:
    client: MongoClient[dict[str, object]] = MongoClient(url, serverSelectionTimeoutMS=5000)
    try:
        return {d["_id"] for d in client["kept"]["docs"].find()}
    finally:
        client.close()


async def test_an_upsert_that_lost_the_race_to_an_insert_returns_the_document() -> None:
    # 100 keys, 4 concurrent find-and-modify upserts each: per key one inserts, the
    # others update what it inserted, and each gets the document back (new=True), as
    # mongod answers. Unpatched SecantusDB 0.7.0b3 answered null to about a quarter.
    async with server_database("tepat_upsert_race") as url:
        client: AsyncMongoClient[dict[str, object]] = AsyncMongoClient(url, maxPoolSize=40)
        try:
            docs = client.get_default_database()["docs"]
            answers = await asyncio.gather(
                *(
                    docs.find_one_and_update(
                        {"k": k},
                        {"$inc": {"n": 1}},
                        upsert=True,
                        return_document=ReturnDocument.AFTER,
                    )
                    for k in range(100)
                    for _ in range(4)
                )
            )
            assert [a for a in answers if a is None] == []
            assert sorted(int(str(d["n"])) for d in await docs.find().to_list()) == [4] * 100
        finally:
            await client.close()
