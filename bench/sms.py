"""``python -m bench.sms``: N SMS due at once through Twilio's limit, none lost or repeated.

In one process on a SQLite file with the embedded broker: N users, each with a phone
number (an ``sms`` contact), and one SMS each due now. The real send path takes them:
the outbox publishes, the consumer claims,
``tepat/services/sending/channel_sender.py`` resolves each number and hands the messages
to :class:`~tepat.adapters.twilio_sms.TwilioSmsChannel`,
which keeps to ``TEPAT_TWILIO_RATE`` (10/s). The Twilio sandbox (over real HTTP, in a
thread) enforces the same 10 requests/s and answers 429 (code 20429) beyond it.

Goals: the drain takes what the rate allows (the first second's burst of ``rate``, then
``rate`` per second: (N - rate) / rate seconds; at most 10 % over); Twilio refuses at
most 1 % of the requests (429), each retried; no 1-second window of arrivals at the
sandbox after the first second holds more than a token bucket of one second's capacity
lets through (2 x rate: arrivals bunch when a busy process sends a little late).
Correctness: every message ``sent``, each number received exactly once, none lost.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import phonenumbers
from pydantic import SecretStr

from bench.report import Correctness, Result, emit, log
from consumers.worker import run_consumer
from scheduler.jobs import run_outbox
from tepat.config import Settings
from tepat.domain.models import Message, MessageStatus, User
from tepat.runtime import open_runtime
from tepat.sandbox.twilio import DEFAULT_ACCOUNT_SID, DEFAULT_AUTH_TOKEN, TwilioSandbox
from tepat.sandbox.twilio_server import running_twilio_sandbox

FULL_MESSAGES = 300
QUICK_MESSAGES = 40
RATE = 10.0  # TEPAT_TWILIO_RATE and the sandbox's limit (Twilio's default for an account)
GOAL_DRAIN_RATIO = 1.10
GOAL_429_SHARE = 0.01
TIMEOUT_SECONDS = 600.0


def _number(i: int) -> str:
    """A distinct valid US number per user (415-555-01xx style ranges are valid to
    libphonenumber; the sandbox refuses invalid ones with 21211)."""
    number = f"+1415{2000000 + i:07d}"
    assert phonenumbers.is_valid_number(phonenumbers.parse(number)), number
    return number


async def _run(workdir: Path, messages: int, rate: float) -> Result:
    sandbox = TwilioSandbox(rate_limit=rate)
    with running_twilio_sandbox(sandbox) as server:
        settings = Settings(
            database_url=f"sqlite:///{workdir}/sms.db",
            broker_url="embedded://",
            admin_api_key=SecretStr("bench-sms-admin-key-0123456789abcdef"),
            metrics_port=0,
            twilio_account_sid=DEFAULT_ACCOUNT_SID,
            twilio_auth_token=SecretStr(DEFAULT_AUTH_TOKEN),
            twilio_from="+14155550100",
            twilio_url=server.base_url,
            twilio_rate=rate,
        )
        async with open_runtime(settings) as rt:
            now = rt.clock.now()
            ids = [f"sms-{i}" for i in range(messages)]
            for i in range(messages):
                user = f"u{i:05d}"
                await rt.store.upsert_user(User(user, "UTC"))
                await rt.store.set_contact(user, "sms", _number(i), True, now)
            due = rt.clock.now()
            batch = [
                Message(
                    id=ids[i],
                    user_id=f"u{i:05d}",
                    category="custom",
                    label="bench.sms",
                    title="",
                    body=f"Bench SMS {i}: your invoice is overdue.",
                    scheduled_at=due,
                    timezone="UTC",
                    dedup_key=f"bench-sms-{i}",
                    live_key=f"bench-sms-{i}",
                    channel="sms",
                )
                for i in range(messages)
            ]
            log(f"sms: {messages} SMS due at once, Tepat and the sandbox at {rate:g}/s")
            stop = asyncio.Event()
            tasks = [
                asyncio.create_task(run_consumer(rt, stop)),
                asyncio.create_task(run_outbox(rt, stop)),
            ]
            started = time.monotonic()
            await rt.store.insert_messages(batch)
            await rt.outbox.flush()
            final: list[Message] = []
            while time.monotonic() - started < TIMEOUT_SECONDS:
                final = await rt.store.get_messages(ids)
                if all(
                    m.status is not MessageStatus.PENDING and m.status is not MessageStatus.SENDING
                    for m in final
                ):
                    break
                await asyncio.sleep(0.1)
            stop.set()
            await asyncio.gather(*tasks, return_exceptions=True)
    received = sandbox.received()
    stats = sandbox.stats()
    return _result(messages, rate, final, received, stats)


def _result(
    messages: int,
    rate: float,
    final: list[Message],
    received: list[dict[str, Any]],
    stats: dict[str, int],
) -> Result:
    numbers = [r["to"] for r in received]
    unique = set(numbers)
    expected = {_number(i) for i in range(messages)}
    times = sorted(datetime.fromisoformat(r["date_created"]) for r in received)
    drain = (times[-1] - times[0]).total_seconds() if times else 0.0
    ideal = max(0.0, (messages - rate) / rate)
    # The most arrivals in any 1-second window after the first second.
    worst = 0
    if times:
        after = [t for t in times if (t - times[0]).total_seconds() >= 1.0]
        j = 0
        for i, t in enumerate(after):
            while (t - after[j]).total_seconds() >= 1.0:
                j += 1
            worst = max(worst, i - j + 1)
    statuses: dict[str, int] = {}
    for m in final:
        statuses[str(m.status)] = statuses.get(str(m.status), 0) + 1
    correctness = Correctness(
        expected=messages,
        sent=len(unique & expected),
        duplicates=len(numbers) - len(unique),
        lost=len(expected - unique),
        details={"statuses": statuses},
    )
    ratio = drain / ideal if ideal else 1.0
    figures = {
        "drain_seconds": round(drain, 2),
        "ideal_seconds": round(ideal, 2),
        "drain_ratio": round(ratio, 3),
        "goal_drain_ratio": GOAL_DRAIN_RATIO,
        "worst_second_after_burst": worst,
        "goal_worst_second": 2 * rate,
        "twilio_429s": stats.get("too_many_requests", 0),
        "goal_429s_at_most": int(GOAL_429_SHARE * messages),
        "requests": stats.get("requests", 0),
    }
    return Result(
        scenario="sms",
        backend="embedded",
        parameters={"messages": messages, "rate": rate},
        figures=figures,
        goals={
            "drain_within_10pct_of_rate": ratio <= GOAL_DRAIN_RATIO,
            "never_above_bucket": worst <= 2 * rate,
            "429s_at_most_1pct": figures["twilio_429s"] <= GOAL_429_SHARE * messages,
        },
        correctness=correctness,
        checks={"every_message_sent": statuses == {"sent": messages}},
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.sms", description=__doc__.split("\n")[0])
    p.add_argument("--messages", type=int, help=f"default {FULL_MESSAGES}; quick {QUICK_MESSAGES}")
    p.add_argument("--rate", type=float, default=RATE, help="TEPAT_TWILIO_RATE and the sandbox's")
    p.add_argument("--quick", action="store_true")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    messages = args.messages or (QUICK_MESSAGES if args.quick else FULL_MESSAGES)
    with tempfile.TemporaryDirectory(prefix="tepat-bench-sms-") as tmp:
        result = asyncio.run(_run(Path(tmp), messages, args.rate))
    emit(result, args.json)
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())
