"""The operator dashboard's figures (:class:`Snapshot`), computed on the server.

Everything comes from what every process shares (the store and the broker), so an API
replica shows what the consumers did; but the counters of provider answers, 429s,
retries, failovers and per-app figures are this process's (``tepat/metrics.py``: on a
split deployment the API process sends nothing, and the page says where each figure
comes from). The store's health is a probe write (``metrics.probe_store``, as
``tepat_store_up``), so a locked or unreachable store shows while it lasts; a store that
cannot be read leaves the page up with the last figures read, and ``problems`` says why.
"""

from __future__ import annotations

import asyncio
import math
import re
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import KW_ONLY, dataclass, field
from datetime import datetime, timedelta
from typing import Protocol

import structlog

from tepat import metrics
from tepat.clock import Clock
from tepat.domain.apps import DEFAULT_APP
from tepat.domain.batches import BadBatch, decode_batch
from tepat.domain.breaker import BreakerState
from tepat.domain.categories import Categories
from tepat.domain.queues import PUSH, queues_for_channels
from tepat.domain.zones import TZDATA_RELEASE
from tepat.ports.broker import Broker, DeadLetter, QueueStats
from tepat.ports.repositories.messages import Counts
from tepat.ports.repositories.ops_views import OpsViewRepository, SendSample
from tepat.ports.repositories.presence import LIVE_TTL

log = structlog.get_logger("tepat.dashboard")

SENDS_WINDOW = timedelta(minutes=1)
LATENESS_WINDOW = timedelta(minutes=5)
FAILURES_WINDOW = timedelta(hours=1)
SAMPLE_LIMIT = 20_000
CACHE_SECONDS = 2.0
# Longest the store's figures may take before the page shows the last ones instead
# (real seconds; a store down would otherwise hold every poll for its own timeout).
STORE_READ_TIMEOUT_SECONDS = 5.0


@dataclass(frozen=True, slots=True)
class QueueLine:
    """One broker queue; ``category`` is set for push's per-category queues only."""

    channel: str
    queue: str
    category: str | None
    ready: int | None  # batches; None: the broker could not be read
    scheduled: int | None
    in_flight: int | None
    dead_letters: int | None


@dataclass(frozen=True, slots=True)
class Rates:
    sends_per_second: float
    sends_window_seconds: float
    lateness_p50_seconds: float | None  # None: nothing sent in the window
    lateness_p99_seconds: float | None
    lateness_samples: int
    lateness_window_seconds: float


@dataclass(frozen=True, slots=True)
class ChannelLine:
    """One channel: the store's messages by status, and this process's counters."""

    channel: str
    provider: str
    messages_by_status: dict[str, int]  # the store: every process's messages
    # This process since it started (tepat_sends_total, tepat_provider_errors_total
    # kind=throttled, tepat_not_sent_retries_total): zero where it sends nothing.
    answers_by_outcome: dict[str, int]
    throttled: int
    retries: int
    # Each of its providers' circuit breaker in this process (tepat_provider_breaker_state):
    # closed, open or half_open.
    breakers: dict[str, str]
    # Its sends failed over, by route ("expo → fcm"; tepat_failovers_total, this process).
    failovers: dict[str, int]


@dataclass(frozen=True, slots=True)
class ProviderLine:
    """One push provider (a device kind): this process's counts of its answers, one per
    device (tepat_push_sends_total since it started)."""

    provider: str
    sends_by_outcome: dict[str, int]
    throttled: int  # its 429s, also in sends_by_outcome: the figure an operator watches


@dataclass(frozen=True, slots=True)
class AppLine:
    """One app (tenant): this process's counters of its work since it started."""

    app: str
    sent: int  # provider answers that sent or delivered (tepat_sends_total)
    answers: int  # every provider answer recorded, retries and failures included
    throttled: int  # 429s on every channel (tepat_provider_errors_total kind=throttled)
    reserve_used: int  # tepat_critical_reserve_used_total, every provider
    # Estimated from tepat_send_lateness_seconds' buckets as Prometheus's
    # histogram_quantile does; None: nothing sent yet.
    lateness_p50_seconds: float | None
    lateness_p99_seconds: float | None


@dataclass(frozen=True, slots=True)
class StoreHealth:
    up: bool  # the probe write went through within metrics.STORE_PROBE_TIMEOUT_SECONDS
    probe_seconds: float  # how long the probe took (real seconds)
    error: str | None  # why the store is unavailable


@dataclass(frozen=True, slots=True)
class DeadLetterLine:
    id: str
    queue: str
    category: str | None
    reason: str
    attempts: int
    messages: int | None  # message ids the batch carries; None when it is not a Tepat batch


@dataclass(frozen=True, slots=True)
class Snapshot:
    generated_at: datetime
    tzdata_release: str
    queues: list[QueueLine]
    rates: Rates
    failures_window_seconds: float
    failures_by_code: dict[str, int]
    deactivated_since: datetime
    devices_deactivated: dict[str, int]
    dead_letters: list[DeadLetterLine]
    channels: list[ChannelLine]
    push_providers: list[ProviderLine]
    apps: list[AppLine]
    live_consumers: int  # consumer processes that beat in the store within LIVE_TTL
    oldest_due_unsent_seconds: float | None  # None: nothing due is waiting
    store: StoreHealth
    # What could not be read this time (the rest is still shown), e.g. "broker: ..."
    problems: list[str] = field(default_factory=list)

    @property
    def devices_deactivated_total(self) -> int:
        return sum(self.devices_deactivated.values())


_GAVE_UP = re.compile(r"^gave up after \d+ attempts: ")
_CODE = re.compile(r"^[A-Za-z][A-Za-z0-9_.-]{0,63}$")


def failure_code(reason: str) -> str:
    """The provider's code in a failed message's reason, else ``other``.

    Reasons read ``DeviceNotRegistered`` (a receipt), ``MessageTooBig: …`` (a
    ticket), ``HTTP_401: …`` / ``UNAUTHORIZED: …`` (a whole request), possibly
    behind ``gave up after N attempts: `` and joined by ``; `` for several
    devices (the first counts); ``outcome_unknown`` and ``deferral_failed`` are
    Tepat's own closing reasons and are kept as they are.
    """
    first = _GAVE_UP.sub("", reason).split("; ", 1)[0]
    head = first.split(":", 1)[0].strip()
    if _CODE.match(head):
        return head
    return "other" if first.strip() else "unknown"


def percentile(sorted_values: list[float], q: float) -> float | None:
    """Nearest-rank percentile (``q`` in (0, 1]) of ascending values; None when empty."""
    if not sorted_values:
        return None
    rank = max(1, math.ceil(q * len(sorted_values)))
    return sorted_values[rank - 1]


def rates(samples: list[SendSample], now: datetime, *, limit: int = SAMPLE_LIMIT) -> Rates:
    """Sends per second and lateness percentiles from newest-first samples.

    When the store returned ``limit`` samples the window was cut short: the
    figures then cover the span of those samples, and say so.
    """
    lateness_window = LATENESS_WINDOW.total_seconds()
    sends_window = SENDS_WINDOW.total_seconds()
    if samples and len(samples) >= limit:
        span = max((now - samples[-1].sent_at).total_seconds(), 1.0)
        lateness_window = min(lateness_window, span)
        sends_window = min(sends_window, span)
    sends_since = now - timedelta(seconds=sends_window)
    sent = sum(1 for s in samples if s.sent_at >= sends_since)
    late = sorted(max(0.0, (s.sent_at - s.scheduled_at).total_seconds()) for s in samples)
    return Rates(
        sends_per_second=sent / sends_window,
        sends_window_seconds=sends_window,
        lateness_p50_seconds=percentile(late, 0.50),
        lateness_p99_seconds=percentile(late, 0.99),
        lateness_samples=len(late),
        lateness_window_seconds=lateness_window,
    )


class DashboardStore(OpsViewRepository, Protocol):
    async def count_messages(self) -> Counts: ...

    async def set_meta(self, key: str, value: str) -> None: ...


def channel_lines(channels: Sequence[str], counts: Counts) -> list[ChannelLine]:
    """Every channel's line, zeros included, so the page's rows and charts stay put."""
    by_status: dict[str, Counter[str]] = {ch: Counter() for ch in channels}
    for (status, _, channel), n in counts.by_status_category_channel.items():
        by_status.setdefault(channel, Counter())[status] += n
    answers = metrics.counter_totals(metrics.SENDS, "channel", "outcome")
    errors = metrics.counter_totals(metrics.PROVIDER_ERRORS, "channel", "kind")
    retries = metrics.counter_totals(metrics.NOT_SENT_RETRIES, "channel")
    breakers = metrics.breaker_states()
    failovers = metrics.counter_totals(metrics.FAILOVERS, "channel", "from", "to")
    return [
        ChannelLine(
            channel=channel,
            provider=metrics.provider_of(channel),
            messages_by_status=dict(sorted(statuses.items())),
            answers_by_outcome={o: n for (of, o), n in sorted(answers.items()) if of == channel},
            throttled=errors.get((channel, "throttled"), 0),
            retries=retries.get((channel,), 0),
            breakers={
                provider: BreakerState(state).name.lower()
                for (of, provider), state in sorted(breakers.items())
                if of == channel
            },
            failovers={
                f"{from_} → {to}": n
                for (of, from_, to), n in sorted(failovers.items())
                if of == channel
            },
        )
        for channel, statuses in by_status.items()
    ]


def provider_lines(providers: Sequence[str]) -> list[ProviderLine]:
    """Every configured push provider's line, zeros included, and any other one counted."""
    sends: dict[str, dict[str, int]] = {p: {} for p in providers}
    for (provider, outcome), n in metrics.counter_totals(
        metrics.PUSH_SENDS, "provider", "outcome"
    ).items():
        sends.setdefault(provider, {})[outcome] = n
    return [
        ProviderLine(provider, dict(sorted(by_outcome.items())), by_outcome.get("throttled", 0))
        for provider, by_outcome in sorted(sends.items())
    ]


def bucket_quantile(q: float, buckets: Sequence[tuple[float, float]]) -> float | None:
    """The ``q`` quantile (in (0, 1]) of cumulative ``(upper bound, count)`` buckets,
    ascending with ``+Inf`` last, as Prometheus's ``histogram_quantile`` estimates it:
    linear within the bucket the rank falls in; the highest finite bound when it falls
    in ``+Inf``'s. None when the buckets are empty."""
    if not buckets or buckets[-1][1] <= 0:
        return None
    rank = q * buckets[-1][1]
    lower, below = 0.0, 0.0
    for upper, count in buckets:
        if count >= rank:
            if math.isinf(upper):
                return lower
            return lower + (upper - lower) * (rank - below) / (count - below)
        lower, below = upper, count
    return lower  # unreachable: the last bucket holds every observation


def app_lines() -> list[AppLine]:
    """Every app counted in this process, and the default app always (zeros included)."""
    answers = metrics.counter_totals(metrics.SENDS, "app", "outcome")
    errors = metrics.counter_totals(metrics.PROVIDER_ERRORS, "app", "kind")
    reserve = metrics.counter_totals(metrics.CRITICAL_RESERVE_USED, "app")
    lateness = metrics.histogram_buckets(metrics.LATENESS, "app")
    apps = {DEFAULT_APP} | {a for a, _ in answers} | {a for a, _ in errors}
    apps |= {a for (a,) in reserve} | set(lateness)
    lines = []
    for app in sorted(apps):
        buckets = lateness.get(app, [])
        by_outcome = {outcome: n for (of, outcome), n in answers.items() if of == app}
        lines.append(
            AppLine(
                app=app,
                sent=by_outcome.get("sent", 0) + by_outcome.get("delivered", 0),
                answers=sum(by_outcome.values()),
                throttled=errors.get((app, "throttled"), 0),
                reserve_used=reserve.get((app,), 0),
                lateness_p50_seconds=bucket_quantile(0.50, buckets),
                lateness_p99_seconds=bucket_quantile(0.99, buckets),
            )
        )
    return lines


def _midnight(now: datetime) -> datetime:
    return now.replace(hour=0, minute=0, second=0, microsecond=0)


@dataclass(frozen=True, slots=True)
class _StoreFigures:
    """What one snapshot reads from the store (empty until a first read succeeds)."""

    midnight: datetime
    samples: list[SendSample] = field(default_factory=list)
    failures: dict[str, int] = field(default_factory=dict)
    deactivated: dict[str, int] = field(default_factory=dict)
    counts: Counts = field(default_factory=Counts)
    oldest: datetime | None = None
    live: dict[str, int] = field(default_factory=dict)


@dataclass(eq=False)
class Dashboard:
    """Builds :class:`Snapshot`, only while someone looks: one at a time, reused for
    ``cache_seconds`` however many browsers poll it.

    The cache runs on a monotonic clock of its own (real time, what load is
    measured in), while the figures use the runtime's clock like everything else.
    """

    store: DashboardStore
    broker: Broker
    categories: Categories
    clock: Clock
    _: KW_ONLY
    # The channels whose queues are shown (the runtime's: push and the configured ones).
    channels: Sequence[str] = (PUSH,)
    # The push providers shown even before they answer (the runtime's device kinds).
    push_providers: Sequence[str] = ("expo",)
    cache_seconds: float = CACHE_SECONDS
    sample_limit: int = SAMPLE_LIMIT
    monotonic: Callable[[], float] = time.monotonic
    _lock: asyncio.Lock = field(default_factory=asyncio.Lock, init=False, repr=False)
    _cached: tuple[float, Snapshot] | None = field(default=None, init=False, repr=False)
    _last_read: _StoreFigures | None = field(default=None, init=False, repr=False)

    def invalidate(self) -> None:
        """Forget the cached snapshot (after an action such as a replay)."""
        self._cached = None

    async def snapshot(self) -> Snapshot:
        async with self._lock:  # concurrent viewers share one computation
            cached = self._cached
            if cached is not None and self.monotonic() - cached[0] < self.cache_seconds:
                return cached[1]
            snap = await self._compute()
            self._cached = (self.monotonic(), snap)
            return snap

    async def _compute(self) -> Snapshot:
        now = self.clock.now()
        queues = [q for ch in self.channels for q in queues_for_channels(self.categories, [ch])]
        problems: list[str] = []
        stats: dict[str, QueueStats] = {}
        dead: list[DeadLetter] = []
        try:
            stats = {s.queue: s for s in await self.broker.stats(queues)}
            dead = await self.broker.dead_letters(queues)
        except Exception as e:  # the store's figures are worth showing on their own
            log.warning("dashboard could not read the broker", error=str(e))
            problems.append(f"broker: {type(e).__name__}: {e}")
        probe_seconds, store_error = await metrics.probe_store(self.store, now, "dashboard")
        store = StoreHealth(store_error is None, probe_seconds, store_error)
        try:
            figures = await asyncio.wait_for(self._read_store(now), STORE_READ_TIMEOUT_SECONDS)
            self._last_read = figures
        except Exception as e:  # the page stays up with the last figures read
            log.warning("dashboard could not read the store", error=repr(e))
            problems.append(f"store: cannot be read ({type(e).__name__}: {e}); older figures")
            figures = self._last_read or _StoreFigures(midnight=_midnight(now))
        if store_error is not None:
            problems.append(f"store unavailable: {store_error}")
        by_code: Counter[str] = Counter()
        for reason, count in figures.failures.items():
            by_code[failure_code(reason)] += count
        return Snapshot(
            generated_at=now,
            tzdata_release=TZDATA_RELEASE,
            queues=self._queue_lines(stats),
            rates=rates(figures.samples, now, limit=self.sample_limit),
            failures_window_seconds=FAILURES_WINDOW.total_seconds(),
            failures_by_code=dict(by_code.most_common()),
            deactivated_since=figures.midnight,
            devices_deactivated=dict(sorted(figures.deactivated.items(), key=lambda kv: -kv[1])),
            dead_letters=[self._dead_line(d) for d in dead],
            channels=channel_lines(self.channels, figures.counts),
            push_providers=provider_lines(self.push_providers),
            apps=app_lines(),
            live_consumers=sum(figures.live.values()),
            oldest_due_unsent_seconds=(
                None if figures.oldest is None else max(0.0, (now - figures.oldest).total_seconds())
            ),
            store=store,
            problems=problems,
        )

    async def _read_store(self, now: datetime) -> _StoreFigures:
        midnight = _midnight(now)
        return _StoreFigures(
            midnight=midnight,
            samples=await self.store.recent_sends(now - LATENESS_WINDOW, self.sample_limit),
            failures=await self.store.failures_since(now - FAILURES_WINDOW),
            deactivated=await self.store.devices_deactivated_since(midnight),
            counts=await self.store.count_messages(),
            oldest=await self.store.oldest_due_unsent(now),
            live=await self.store.live_members(now - LIVE_TTL),
        )

    def _category(self, queue: str) -> str | None:
        policy = self.categories.by_queue().get(queue)
        return policy.name if policy else None

    def _queue_lines(self, stats: dict[str, QueueStats]) -> list[QueueLine]:
        """Channel by channel, each channel's queues highest priority first."""
        return [
            QueueLine(channel, queue, self._category(queue), *_depths(stats.get(queue)))
            for channel in self.channels
            for queue in queues_for_channels(self.categories, [channel])
        ]

    def _dead_line(self, d: DeadLetter) -> DeadLetterLine:
        try:
            messages: int | None = len(decode_batch(d.queue, d.body).ids)
        except BadBatch:
            messages = None
        return DeadLetterLine(
            d.id, d.queue, self._category(d.queue), d.reason, d.attempts, messages
        )


def _depths(s: QueueStats | None) -> tuple[int | None, int | None, int | None, int | None]:
    """A queue's ready, scheduled, in flight and dead letters; None each when unread."""
    return (s.ready, s.scheduled, s.in_flight, s.dead_letters) if s else (None, None, None, None)
