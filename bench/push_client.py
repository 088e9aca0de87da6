"""``python -m bench.push_client [--provider fcm|apns] [--messages N] [--json]``: the FCM or
APNs adapter alone, its CPU per notification.

The adapter sends ``N`` notifications (in batches of its ``max_batch``, as the push
channel hands them) straight to its sandbox, which runs in a thread of this process; the
figure is the CPU time of the sending thread only (``time.thread_time``), so the sandbox's
work is not in it. A first batch is sent before the clock starts (the connection, the
access token). Exit status 1 when a notification did not get a ticket.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from tepat.adapters.apns_auth import ProviderToken, read_signing_key
from tepat.adapters.apns_push import ApnsPushProvider
from tepat.adapters.fcm_auth import FcmAuth, read_service_account
from tepat.adapters.fcm_push import FcmPushProvider
from tepat.clock import SystemClock
from tepat.ports.push import PushProvider, PushRequest, TicketOk, Tickets
from tepat.sandbox.apns import ApnsSandbox
from tepat.sandbox.fcm import FcmSandbox
from tepat.sandbox.server import running_sandbox


def requests(count: int) -> list[PushRequest]:
    """What the push channel sends (tepat/services/sending/push_channel.py)."""
    out = []
    for i in range(count):
        message_id = str(uuid.uuid4())
        out.append(
            PushRequest(
                message_id,
                f"{i:064x}",
                "Time to stretch",
                f"Your reminder number {i}",
                {"kind": "reminder", "tepat_message_id": message_id, "category": "reminders"},
                "reminders",
                ttl_seconds=3600,
            )
        )
    return out


async def measure(provider: PushProvider, count: int) -> dict[str, Any]:
    size = provider.max_batch
    await provider.send(requests(size))
    batches = [requests(min(size, count - i)) for i in range(0, count, size)]
    ok = 0
    started, wall = time.thread_time(), time.perf_counter()
    for batch in batches:
        result = await provider.send(batch)
        if isinstance(result, Tickets):
            ok += sum(isinstance(o, TicketOk) for o in result.outcomes)
    cpu, wall = time.thread_time() - started, time.perf_counter() - wall
    return {
        "messages": count,
        "tickets": ok,
        "cpu_ms_per_notification": round(cpu * 1000 / count, 4),
        "messages_per_second": round(count / wall),
    }


async def run(kind: str, count: int, workdir: Path) -> dict[str, Any]:
    clock = SystemClock()
    if kind == "fcm":
        fcm = FcmSandbox(clock=clock)
        with running_sandbox(fcm) as server:
            account = workdir / "sa.json"
            account.write_text(json.dumps(fcm.service_account(server.base_url, "bench")))
            auth = FcmAuth(read_service_account(str(account)), clock)
            provider: Any = FcmPushProvider(auth, clock=clock, base_url=server.base_url)
            provider.adaptive.set_share(1.0)
            async with provider:
                return await measure(provider, count)
    apns = ApnsSandbox(clock=clock)
    key_file = workdir / "AuthKey.p8"
    key_file.write_text(apns.signing_key("BENCHKEY01"))
    token = ProviderToken(
        read_signing_key(key_file), key_id="BENCHKEY01", team_id=apns.team_id, clock=clock
    )
    with running_sandbox(apns) as server:
        async with ApnsPushProvider(
            token, topic=apns.topic, clock=clock, base_url=server.base_url
        ) as provider:
            return await measure(provider, count)


def main() -> int:
    p = argparse.ArgumentParser(prog="python -m bench.push_client", description=__doc__)
    p.add_argument("--provider", choices=("fcm", "apns"), default="fcm")
    p.add_argument("--messages", type=int, default=5000)
    p.add_argument("--json", action="store_true", help="the figures as one JSON line")
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as workdir:
        figures = asyncio.run(run(args.provider, args.messages, Path(workdir)))
    figures["provider"] = args.provider
    if args.json:
        print(json.dumps(figures))
    else:
        for name, value in figures.items():
            print(f"{name}: {value}")
    return 0 if figures["tickets"] == args.messages else 1


if __name__ == "__main__":
    raise SystemExit(main())
