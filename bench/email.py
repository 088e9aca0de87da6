"""``python -m bench.email``: N e-mails due at once through an SMTP relay's limit, none
lost or repeated.

In one process on a SQLite file with the embedded broker: N users, each with an e-mail
address (an ``email`` contact), and one e-mail each due now. The real send path takes
them: the outbox publishes, the consumer claims,
``tepat/services/sending/channel_sender.py`` resolves each address and hands the messages to
:class:`~tepat.adapters.smtp_email.SmtpEmailChannel`, which keeps to ``TEPAT_SMTP_RATE``
(50/s) over its pool of connections. The relay is a real SMTP server (``aiosmtpd``, in a
thread) that takes at most 1.1 x ``rate`` recipients per second (a token bucket, as SES
does; the rate is set a little under the quota) and answers ``454 4.7.0 Throttling
failure`` beyond it.

Goals: the drain takes what the rate allows (the first second's burst of ``rate``, then
``rate`` per second: (N - rate) / rate seconds; at most 10 % over); the relay refuses at
most 1 % of the recipients (each retried); no 1-second window of arrivals after the first
second holds more than 2 x rate (what a token bucket of one second's capacity lets
through). Correctness: every message ``sent``, each address received exactly once.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from aiosmtpd.controller import Controller
from pydantic import SecretStr

from bench.report import Correctness, Result, emit, log
from consumers.worker import run_consumer
from scheduler.jobs import run_outbox
from tepat.adapters.rate_limit import TokenBucket
from tepat.clock import SystemClock
from tepat.config import Settings
from tepat.domain.models import Message, MessageStatus, User
from tepat.runtime import open_runtime

FULL_MESSAGES = 1000
QUICK_MESSAGES = 100
RATE = 50.0  # TEPAT_SMTP_RATE
# The relay's limit over Tepat's: SES (and any token bucket) refuses a message that
# arrives a millisecond early, and arrivals jitter by the network and the relay's own
# work, so one sets the rate a little under the quota, as here.
RELAY_HEADROOM = 1.10
GOAL_DRAIN_RATIO = 1.10
GOAL_REFUSED_SHARE = 0.01
TIMEOUT_SECONDS = 600.0


class Relay:
    """The aiosmtpd handler: a per-second limit on recipients, and what arrived when."""

    def __init__(self, rate: float) -> None:
        self.bucket = TokenBucket(rate, SystemClock())
        self.arrivals: list[tuple[float, str, str]] = []  # (monotonic, rcpt, Message-ID)
        self.refused = 0
        self.lock = threading.Lock()

    async def handle_RCPT(
        self, server: Any, session: Any, envelope: Any, address: str, options: list[str]
    ) -> str:
        if self.bucket.try_acquire() > 0:
            with self.lock:
                self.refused += 1
            return "454 4.7.0 Throttling failure: Maximum sending rate exceeded"
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        content = envelope.content.decode("utf-8", "replace")
        mid = next(
            (
                line.split(":", 1)[1].strip()
                for line in content.splitlines()
                if line.lower().startswith("message-id:")
            ),
            "",
        )
        with self.lock:
            for rcpt in envelope.rcpt_tos:
                self.arrivals.append((time.monotonic(), rcpt, mid))
        return "250 2.0.0 Ok: queued"


def _address(i: int) -> str:
    return f"user{i:05d}@bench.example"


async def _run(workdir: Path, messages: int, rate: float) -> Result:
    relay = Relay(rate * RELAY_HEADROOM)
    controller = Controller(relay, hostname="127.0.0.1", port=_free_port(), ready_timeout=10)
    controller.start()
    try:
        settings = Settings(
            database_url=f"sqlite:///{workdir}/email.db",
            broker_url="embedded://",
            admin_api_key=SecretStr("bench-email-admin-key-0123456789abcdef"),
            metrics_port=0,
            smtp_host="127.0.0.1",
            smtp_port=controller.port,
            smtp_tls="none",
            smtp_from="Bench <no-reply@bench.example>",
            smtp_rate=rate,
            public_url="https://bench.example",
            unsubscribe_secret=SecretStr("bench-unsubscribe-secret-0123456789abcdef"),
        )
        async with open_runtime(settings) as rt:
            now = rt.clock.now()
            for i in range(messages):
                user = f"u{i:05d}"
                await rt.store.upsert_user(User(user, "UTC"))
                await rt.store.set_contact(user, "email", _address(i), True, now)
            ids = [f"email-{i}" for i in range(messages)]
            due = rt.clock.now()
            batch = [
                Message(
                    id=ids[i],
                    user_id=f"u{i:05d}",
                    category="custom",
                    label="bench.email",
                    title=f"Bench e-mail {i}",
                    body=f"Bench e-mail {i}: your invoice is overdue.",
                    scheduled_at=due,
                    timezone="UTC",
                    dedup_key=f"bench-email-{i}",
                    live_key=f"bench-email-{i}",
                    channel="email",
                    content={"html": f"<p>Bench e-mail <b>{i}</b></p>"},
                )
                for i in range(messages)
            ]
            log(f"email: {messages} e-mails due at once, Tepat and the relay at {rate:g}/s")
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
    finally:
        controller.stop()
    return _result(messages, rate, final, relay)


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _result(messages: int, rate: float, final: list[Message], relay: Relay) -> Result:
    arrivals = sorted(relay.arrivals)
    rcpts = [a[1] for a in arrivals]
    unique = set(rcpts)
    expected = {_address(i) for i in range(messages)}
    times = [a[0] for a in arrivals]
    drain = (times[-1] - times[0]) if times else 0.0
    ideal = max(0.0, (messages - rate) / rate)
    worst = 0
    if times:
        after = [t for t in times if t - times[0] >= 1.0]
        j = 0
        for i, t in enumerate(after):
            while t - after[j] >= 1.0:
                j += 1
            worst = max(worst, i - j + 1)
    statuses: dict[str, int] = {}
    for m in final:
        statuses[str(m.status)] = statuses.get(str(m.status), 0) + 1
    correctness = Correctness(
        expected=messages,
        sent=len(unique & expected),
        duplicates=len(rcpts) - len(unique),
        lost=len(expected - unique),
        details={"statuses": statuses, "distinct_message_ids": len({a[2] for a in arrivals})},
    )
    ratio = drain / ideal if ideal else 1.0
    figures = {
        "drain_seconds": round(drain, 2),
        "ideal_seconds": round(ideal, 2),
        "drain_ratio": round(ratio, 3),
        "goal_drain_ratio": GOAL_DRAIN_RATIO,
        "worst_second_after_burst": worst,
        "goal_worst_second": 2 * rate,
        "relay_refusals": relay.refused,
        "goal_refusals_at_most": int(GOAL_REFUSED_SHARE * messages),
    }
    return Result(
        scenario="email",
        backend="embedded",
        parameters={"messages": messages, "rate": rate},
        figures=figures,
        goals={
            "drain_within_10pct_of_rate": ratio <= GOAL_DRAIN_RATIO,
            "never_above_bucket": worst <= 2 * rate,
            "refusals_at_most_1pct": relay.refused <= GOAL_REFUSED_SHARE * messages,
        },
        correctness=correctness,
        checks={"every_message_sent": statuses == {"sent": messages}},
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.email", description=__doc__.split("\n")[0])
    p.add_argument("--messages", type=int, help=f"default {FULL_MESSAGES}; quick {QUICK_MESSAGES}")
    p.add_argument("--rate", type=float, default=RATE, help="TEPAT_SMTP_RATE and the relay's")
    p.add_argument("--quick", action="store_true")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    messages = args.messages or (QUICK_MESSAGES if args.quick else FULL_MESSAGES)
    with tempfile.TemporaryDirectory(prefix="tepat-bench-email-") as tmp:
        result = asyncio.run(_run(Path(tmp), messages, args.rate))
    emit(result, args.json)
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())
