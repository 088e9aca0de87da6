"""The production composition, run whole (issue 20, part 3): ``tepat api --workers 2``,
two ``tepat scheduler`` and two ``tepat consumers`` processes on ActiveMQ and the
Mongo-wire server, the Expo sandbox as its own process; an app-shaped workload through
the HTTP API (users, devices, one-offs falling due over a burst); and one process of
each kind killed with SIGKILL in turn, mid-burst: an API worker (uvicorn's supervisor
starts another), a consumer and a scheduler (each replaced by a new process).

Every notification arrives; a duplicate is allowed only for a send cut by a consumer's
kill between the provider's answer and its record (docs/guides/guarantees.md), and then
no more than the messages due around that instant.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import uuid
from collections import Counter
from contextlib import ExitStack
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest

from tests.ops.support import (
    Proc,
    categories_on_queues,
    child_env,
    free_port,
    json_lines,
    tepat,
    wait_http,
)
from tests.support.mongo_factory import server_database
from tests.support.waiting import eventually

pytestmark = pytest.mark.activemq
KEY = "ops-composition-admin-key-0123456789abcdef"
USERS = 40
BURST_SECONDS = 20
# Room for the one-offs' POSTs (an API worker is killed among them) before the first is
# due, so that the consumer and the scheduler are killed while the burst is under way.
LEAD_SECONDS = 20
# A consumer's kill can cut the sends of the batches it holds (about a second's worth).
DUPLICATES_AT_MOST = 6


def _token(n: int) -> str:
    return f"ExponentPushToken[composition-{n:03d}]"


async def _retrying(client: httpx.AsyncClient, method: str, url: str, **kw: object) -> int:
    """An idempotent request, again after a dropped connection (a killed API worker)."""
    for _ in range(20):
        try:
            r = await client.request(method, url, **kw)  # type: ignore[arg-type]
        except httpx.TransportError:
            await asyncio.sleep(0.2)  # a new worker is starting: pace the retry
            continue
        if r.status_code < 500:
            assert r.is_success, r.text
            return r.status_code
    raise AssertionError(f"{method} {url}: no answer after 20 tries")


def _first_arrivals(accepted: list[dict[str, object]]) -> dict[str, datetime]:
    first: dict[str, datetime] = {}
    for entry in accepted:
        at = datetime.fromisoformat(str(entry["received_at"]))
        token = str(entry["to"])
        first[token] = min(at, first.get(token, at))
    return first


def _api_worker_pids(api: Proc) -> set[int]:
    return {e["pid"] for e in json_lines(api) if e.get("event") == "api worker ready"}


async def test_every_notification_arrives_with_each_process_kind_killed(tmp_path: Path) -> None:
    broker = os.environ.get("TEPAT_TEST_STOMP_URL", "")
    if not broker:
        pytest.skip("TEPAT_TEST_STOMP_URL is not set (scripts/test.sh starts ActiveMQ)")
    prefix = f"comp{uuid.uuid4().hex[:8]}"
    sandbox_port, api_port = free_port(), free_port()
    async with server_database("tepat_composition") as database_url:
        env = child_env(
            {
                "TEPAT_DATABASE_URL": database_url,
                "TEPAT_BROKER_URL": broker,
                "TEPAT_EXPO_URL": f"http://127.0.0.1:{sandbox_port}",
                "TEPAT_ADMIN_API_KEY": KEY,
                "TEPAT_CATEGORIES": categories_on_queues(prefix),
                "TEPAT_LOG_JSON": "true",
                # A killed consumer's claims come back within seconds, not minutes.
                "TEPAT_SENDING_LEASE_SECONDS": "6",
                "TEPAT_SWEEP_INTERVAL_SECONDS": "1",
                "TEPAT_SWEEP_GRACE_SECONDS": "5",
                "TEPAT_RECEIPT_DELAY_SECONDS": "3600",
            }
        )
        sandbox_url = f"http://127.0.0.1:{sandbox_port}"
        base = f"http://127.0.0.1:{api_port}"
        with ExitStack() as stack:

            async def start(kind: str, n: int) -> Proc:
                port = free_port()
                proc = stack.enter_context(
                    tepat(f"{kind}-{n}", [kind, "--metrics-port", str(port)], env, tmp_path)
                )
                await wait_http(proc, f"http://127.0.0.1:{port}/healthz")
                return proc

            sandbox = stack.enter_context(
                tepat("sandbox", ["sandbox", "expo", "--port", str(sandbox_port)], env, tmp_path)
            )
            await wait_http(sandbox, f"{sandbox_url}/_sandbox/stats")
            consumers = [await start("consumers", 1), await start("consumers", 2)]
            schedulers = [await start("scheduler", 1), await start("scheduler", 2)]
            args = ["api", "--workers", "2", "--port", str(api_port)]
            api = stack.enter_context(tepat("api", args, env, tmp_path))
            await wait_http(api, f"{base}/readyz")

            async def both_workers() -> bool:
                return len(_api_worker_pids(api)) == 2

            await eventually(both_workers, timeout=60, what="two api workers ready")

            async with httpx.AsyncClient(
                base_url=base, headers={"X-API-Key": KEY}, timeout=30
            ) as client:
                for n in range(USERS):
                    await _retrying(client, "PUT", f"/v1/users/u{n}", json={"timezone": "UTC"})
                    await _retrying(
                        client,
                        "PUT",
                        f"/v1/users/u{n}/devices/phone",
                        json={"push_token": _token(n)},
                    )
                start_at = datetime.now(UTC) + timedelta(seconds=LEAD_SECONDS)
                for n in range(USERS):
                    if n == USERS // 2:
                        victim = min(_api_worker_pids(api))
                        os.kill(victim, signal.SIGKILL)  # uvicorn's supervisor starts another
                    send_at = start_at + timedelta(seconds=n * BURST_SECONDS / USERS)
                    body = {
                        "idempotency_key": f"k{n}",
                        "category": "custom",
                        "title": "t",
                        "body": f"n{n}",
                        "send_at": send_at.isoformat(),
                    }
                    await _retrying(client, "POST", f"/v1/users/u{n}/notifications", json=body)

                async def accepted() -> list[dict[str, object]]:
                    r = await client.get(f"{sandbox_url}/_sandbox/received")
                    return [e for e in r.json()["received"] if e["status"] == "ok"]

                async def received() -> Counter[str]:
                    return Counter(str(e["to"]) for e in await accepted())

                async def arrived(count: int) -> bool:
                    got = await received()
                    return sum(1 for n in range(USERS) if _token(n) in got) >= count

                # Mid-burst: a consumer, then a scheduler, each killed and replaced.
                await eventually(lambda: arrived(USERS // 4), timeout=90, what="a quarter in")
                # The kills must land mid-burst, or the test shows nothing about them.
                assert not await arrived(USERS), "the burst was over before the consumer kill"
                kills = {"consumer": datetime.now(UTC)}
                consumers[0].popen.send_signal(signal.SIGKILL)
                consumers.append(await start("consumers", 3))
                await eventually(lambda: arrived(USERS // 2), timeout=90, what="half in")
                assert not await arrived(USERS), "the burst was over before the scheduler kill"
                kills["scheduler"] = datetime.now(UTC)
                schedulers[0].popen.send_signal(signal.SIGKILL)
                schedulers.append(await start("scheduler", 3))

                await eventually(lambda: arrived(USERS), timeout=120, what="every notification")
                counts = await received()
                first = _first_arrivals(await accepted())
                assert len(_api_worker_pids(api)) >= 3, "the killed API worker was replaced"
            duplicates = sum(c - 1 for c in counts.values())
            assert set(counts) == {_token(n) for n in range(USERS)}
            assert duplicates <= DUPLICATES_AT_MOST, counts
            # The figures of bench/README.md ("The production composition"), not asserted:
            # timing belongs to benchmarks (docs/PRINCIPLES.md).
            late = sorted(
                (
                    first[_token(n)] - (start_at + timedelta(seconds=n * BURST_SECONDS / USERS))
                ).total_seconds()
                for n in range(USERS)
            )
            print(
                "composition figures:",
                json.dumps(
                    {
                        "notifications": USERS,
                        "arrived": len(counts),
                        "duplicates": duplicates,
                        "lateness_s": {"p50": late[len(late) // 2], "max": late[-1]},
                        "last_arrival_after_kill_s": {
                            kind: (max(first.values()) - at).total_seconds()
                            for kind, at in kills.items()
                        },
                    }
                ),
            )
