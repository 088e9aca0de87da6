"""``python -m bench email|sms``: N messages of one channel due at once through the
provider's limit, none lost or repeated.

In one process on a SQLite file with the embedded broker: N users, each with a contact of
the channel, and one message each due now. The real send path takes them: the outbox
publishes, the consumer claims, ``tepat/services/sending/channel_sender.py`` resolves each
contact and hands the messages to the channel's adapter, which keeps to the channel's
rate. Only the provider differs:

* ``email``: :class:`~tepat.adapters.smtp_email.SmtpEmailChannel` at ``TEPAT_SMTP_RATE``
  (50/s) over its pool of connections, to a real SMTP server (``aiosmtpd``, in a thread)
  that takes at most 1.1 x ``rate`` recipients per second (a token bucket, as SES does;
  the rate is set a little under the quota) and answers ``454 4.7.0 Throttling failure``
  beyond it.
* ``sms``: :class:`~tepat.adapters.twilio_sms.TwilioSmsChannel` at ``TEPAT_TWILIO_RATE``
  (10/s), to the Twilio sandbox (over real HTTP, in a thread) that enforces the same
  10 requests/s and answers 429 (code 20429) beyond it.

Goals: the drain takes what the rate allows (the first second's burst of ``rate``, then
``rate`` per second: (N - rate) / rate seconds; at most 10 % over); the provider refuses
at most 1 % (each refusal retried); no 1-second window of arrivals after the first second
holds more than 2 x rate (what a token bucket of one second's capacity lets through:
arrivals bunch when a busy process sends a little late). Correctness: every message
``sent``, each contact received exactly once, none lost.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import phonenumbers
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
from tepat.sandbox.runner import bind_free_port
from tepat.sandbox.server import running_sandbox
from tepat.sandbox.twilio import DEFAULT_ACCOUNT_SID, DEFAULT_AUTH_TOKEN, TwilioSandbox

GOAL_DRAIN_RATIO = 1.10
GOAL_REFUSED_SHARE = 0.01
TIMEOUT_SECONDS = 600.0
# The relay's limit over Tepat's: SES (and any token bucket) refuses a message that
# arrives a millisecond early, and arrivals jitter by the network and the relay's own
# work, so one sets the rate a little under the quota, as here.
RELAY_HEADROOM = 1.10


@dataclass
class Observed:
    """What the provider saw: arrivals as (seconds, contact), its refusals, and the
    figures and details only this provider has."""

    arrivals: list[tuple[float, str]]
    refused: int
    figures: dict[str, int] = field(default_factory=dict)
    details: dict[str, int] = field(default_factory=dict)


@dataclass
class Provider:
    settings: dict[str, Any]  # what points Tepat at it
    observe: Callable[[], Observed]


@dataclass(frozen=True)
class Channel:
    name: str
    full: int  # messages
    quick: int
    rate: float  # Tepat's rate, and the provider's limit
    plural: str  # for the log line
    contact: Callable[[int], str]
    content: Callable[[int], dict[str, Any]]  # a Message's title, body and content
    provider: Callable[[float], AbstractContextManager[Provider]]
    # The refusals' figure, its goal figure and its goal, named as the provider says it.
    refusal_names: tuple[str, str, str]


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

    def observed(self) -> Observed:
        with self.lock:
            arrivals = list(self.arrivals)
        return Observed(
            [(at, rcpt) for at, rcpt, _ in arrivals],
            self.refused,
            details={"distinct_message_ids": len({mid for _, _, mid in arrivals})},
        )


@contextmanager
def _smtp_relay(rate: float) -> Iterator[Provider]:
    relay = Relay(rate * RELAY_HEADROOM)
    with bind_free_port() as sock:
        port = sock.getsockname()[1]
    controller = Controller(relay, hostname="127.0.0.1", port=port, ready_timeout=10)
    controller.start()
    try:
        settings = {
            "smtp_host": "127.0.0.1",
            "smtp_port": controller.port,
            "smtp_tls": "none",
            "smtp_from": "Bench <no-reply@bench.example>",
            "smtp_rate": rate,
            "public_url": "https://bench.example",
            "unsubscribe_secret": SecretStr("bench-unsubscribe-secret-0123456789abcdef"),
        }
        yield Provider(settings, relay.observed)
    finally:
        controller.stop()


@contextmanager
def _twilio(rate: float) -> Iterator[Provider]:
    sandbox = TwilioSandbox(rate_limit=rate)
    with running_sandbox(sandbox) as server:
        settings = {
            "twilio_account_sid": DEFAULT_ACCOUNT_SID,
            "twilio_auth_token": SecretStr(DEFAULT_AUTH_TOKEN),
            "twilio_from": "+14155550100",
            "twilio_url": server.base_url,
            "twilio_rate": rate,
        }

        def observed() -> Observed:
            stats = sandbox.stats()
            arrivals = [
                (datetime.fromisoformat(r["date_created"]).timestamp(), r["to"])
                for r in sandbox.received()
            ]
            too_many = stats.get("too_many_requests", 0)
            return Observed(arrivals, too_many, {"requests": stats.get("requests", 0)})

        yield Provider(settings, observed)


def _number(i: int) -> str:
    """A distinct valid US number per user (415-555-01xx style ranges are valid to
    libphonenumber; the sandbox refuses invalid ones with 21211)."""
    number = f"+1415{2000000 + i:07d}"
    assert phonenumbers.is_valid_number(phonenumbers.parse(number)), number
    return number


EMAIL = Channel(
    name="email",
    full=1000,
    quick=100,
    rate=50.0,
    plural="e-mails",
    contact=lambda i: f"user{i:05d}@bench.example",
    content=lambda i: {
        "title": f"Bench e-mail {i}",
        "body": f"Bench e-mail {i}: your invoice is overdue.",
        "content": {"html": f"<p>Bench e-mail <b>{i}</b></p>"},
    },
    provider=_smtp_relay,
    refusal_names=("relay_refusals", "goal_refusals_at_most", "refusals_at_most_1pct"),
)
SMS = Channel(
    name="sms",
    full=300,
    quick=40,
    rate=10.0,  # Twilio's default for an account
    plural="SMS",
    contact=_number,
    content=lambda i: {"title": "", "body": f"Bench SMS {i}: your invoice is overdue."},
    provider=_twilio,
    refusal_names=("twilio_429s", "goal_429s_at_most", "429s_at_most_1pct"),
)
CHANNELS = {c.name: c for c in (EMAIL, SMS)}


async def _run(channel: Channel, workdir: Path, messages: int, rate: float) -> Result:
    with channel.provider(rate) as provider:
        settings = Settings(
            database_url=f"sqlite:///{workdir}/{channel.name}.db",
            broker_url="embedded://",
            admin_api_key=SecretStr(f"bench-{channel.name}-admin-key-0123456789abcdef"),
            metrics_port=0,
            **provider.settings,
        )
        async with open_runtime(settings) as rt:
            now = rt.clock.now()
            for i in range(messages):
                user = f"u{i:05d}"
                await rt.store.upsert_user(User(user, "UTC"))
                await rt.store.set_contact(user, channel.name, channel.contact(i), True, now)
            ids = [f"{channel.name}-{i}" for i in range(messages)]
            due = rt.clock.now()
            batch = [
                Message(
                    id=ids[i],
                    user_id=f"u{i:05d}",
                    category="custom",
                    label=f"bench.{channel.name}",
                    scheduled_at=due,
                    timezone="UTC",
                    dedup_key=f"bench-{channel.name}-{i}",
                    live_key=f"bench-{channel.name}-{i}",
                    channel=channel.name,
                    **channel.content(i),
                )
                for i in range(messages)
            ]
            log(
                f"{channel.name}: {messages} {channel.plural} due at once,"
                f" Tepat and the provider at {rate:g}/s"
            )
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
        observed = provider.observe()
    return _result(channel, messages, rate, final, observed)


def worst_second(times: list[float]) -> int:
    """The most arrivals in any 1-second window after the first second (``times`` sorted)."""
    worst = 0
    if times:
        after = [t for t in times if t - times[0] >= 1.0]
        j = 0
        for i, t in enumerate(after):
            while t - after[j] >= 1.0:
                j += 1
            worst = max(worst, i - j + 1)
    return worst


def _result(
    channel: Channel, messages: int, rate: float, final: list[Message], observed: Observed
) -> Result:
    arrivals = sorted(observed.arrivals)
    contacts = [contact for _, contact in arrivals]
    unique = set(contacts)
    expected = {channel.contact(i) for i in range(messages)}
    times = [at for at, _ in arrivals]
    drain = (times[-1] - times[0]) if times else 0.0
    ideal = max(0.0, (messages - rate) / rate)
    worst = worst_second(times)
    statuses: dict[str, int] = {}
    for m in final:
        statuses[str(m.status)] = statuses.get(str(m.status), 0) + 1
    correctness = Correctness(
        expected=messages,
        sent=len(unique & expected),
        duplicates=len(contacts) - len(unique),
        lost=len(expected - unique),
        details={"statuses": statuses, **observed.details},
    )
    ratio = drain / ideal if ideal else 1.0
    refused, goal_refused, refusals_goal = channel.refusal_names
    figures = {
        "drain_seconds": round(drain, 2),
        "ideal_seconds": round(ideal, 2),
        "drain_ratio": round(ratio, 3),
        "goal_drain_ratio": GOAL_DRAIN_RATIO,
        "worst_second_after_burst": worst,
        "goal_worst_second": 2 * rate,
        refused: observed.refused,
        goal_refused: int(GOAL_REFUSED_SHARE * messages),
        **observed.figures,
    }
    return Result(
        scenario=channel.name,
        backend="embedded",
        parameters={"messages": messages, "rate": rate},
        figures=figures,
        goals={
            "drain_within_10pct_of_rate": ratio <= GOAL_DRAIN_RATIO,
            "never_above_bucket": worst <= 2 * rate,
            refusals_goal: observed.refused <= GOAL_REFUSED_SHARE * messages,
        },
        correctness=correctness,
        checks={"every_message_sent": statuses == {"sent": messages}},
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n\n")[0])
    p.add_argument("channel", choices=sorted(CHANNELS))
    p.add_argument("--messages", type=int, help="default e-mail 1000, SMS 300 (quick: 100, 40)")
    p.add_argument("--rate", type=float, help="Tepat's rate and the provider's (e-mail 50, SMS 10)")
    p.add_argument("--quick", action="store_true")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    channel = CHANNELS[args.channel]
    messages = args.messages or (channel.quick if args.quick else channel.full)
    rate = args.rate or channel.rate
    with tempfile.TemporaryDirectory(prefix=f"tepat-bench-{channel.name}-") as tmp:
        result = asyncio.run(_run(channel, Path(tmp), messages, rate))
    emit(result, args.json)
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())
