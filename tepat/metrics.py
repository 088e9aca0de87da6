"""Prometheus metrics: what each process records, and the cached store/broker gauges.

Every process registers its metrics on :data:`REGISTRY`, together with the
standard process and platform collectors, and serves it: ``tepat api`` and
``tepat serve`` at ``/metrics`` on their HTTP port, ``tepat scheduler`` and
``tepat consumers`` on ``TEPAT_METRICS_PORT`` (:func:`metrics_app`).

Counters and histograms count what *this* process did (sends, lateness,
provider errors), so Prometheus sums them over replicas. Message counts and
queue depths describe the shared store and broker: reading them is expensive
(a count over every message, a broker browse), so they are not computed per
scrape; one background task (:func:`run_gauge_refresher`, run by ``tepat
scheduler`` and ``tepat serve`` only) refreshes them every
``TEPAT_METRICS_REFRESH_SECONDS`` and scrapes serve the cached values.

The metrics page (docs/guides/operations.md, "Metrics") lists every family exactly as
exported; ``tests/ops`` compares the two, so rename here and there together.

Every channel (push, inbox, e-mail, SMS, webhooks) is counted alike, labelled by
``channel`` and ``provider`` (:data:`PROVIDERS`): each provider answer once, where the
recorder reads it (:func:`count_answer`), and each provider error where it is seen
(:func:`count_provider_error`). Labels stay bounded: a channel, its provider, an outcome,
a category, a provider's code; never a user, a message, a target or free text.

The sends, provider errors, push answers, critical reserve use and lateness also carry
``app``: the app (tenant) whose work was observed, read from the context the work runs
in (``tepat/app_context.py``), never passed by a call site. App ids are validated ids
and there are at most ``MAX_APPS`` of them, so the label stays bounded too.
"""

from __future__ import annotations

import asyncio
import re
from datetime import datetime
from functools import partial
from typing import TYPE_CHECKING, Literal, Protocol

import prometheus_client
import structlog
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    GC_COLLECTOR,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    Info,
    PlatformCollector,
    ProcessCollector,
    generate_latest,
)

from tepat.app_context import current_app
from tepat.clock import Clock
from tepat.domain.categories import OUTCOME_UNKNOWN, Categories
from tepat.domain.models import MessageStatus
from tepat.domain.outcomes import Next
from tepat.domain.queues import PUSH
from tepat.domain.zones import TZDATA_RELEASE
from tepat.loops import wait_or_stop
from tepat.ports.broker import Broker
from tepat.ports.channel import ChannelOutcome, Refused, Withheld
from tepat.ports.push import Rejected, TicketError, TicketOk
from tepat.ports.store import Store
from tepat.ports.try_again import TryAgain

if TYPE_CHECKING:
    from starlette.applications import Starlette

log = structlog.get_logger("tepat.metrics")

# `*_created` series double every counter and histogram for a timestamp nobody
# alerts on (Prometheus finds resets itself).
prometheus_client.disable_created_metrics()  # type: ignore[no-untyped-call]

REGISTRY = CollectorRegistry(auto_describe=True)
ProcessCollector(registry=REGISTRY)  # process_cpu_seconds_total, process_resident_memory_bytes…
PlatformCollector(registry=REGISTRY)  # python_info
REGISTRY.register(GC_COLLECTOR)  # python_gc_*
# Every family below on REGISTRY.
_counter = partial(Counter, registry=REGISTRY)
_gauge = partial(Gauge, registry=REGISTRY)
_histogram = partial(Histogram, registry=REGISTRY)

# --- recorded by the process that does the work (consumers, serve) ---

SEND_LATENCY = _histogram(
    "tepat_send_latency_seconds",
    "Duration of one push provider request",
    buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
)
LATENESS = _histogram(
    "tepat_send_lateness_seconds",
    "Time from a message's scheduled instant to the provider accepting it, by app, channel and"
    " category",
    ["app", "channel", "category"],
    buckets=(0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 300, 1800),
)
# prometheus_client strips a `_total` suffix from a Counter's name and appends it on
# export; writing it here keeps the name in the code the one Prometheus shows.
SENDS = _counter(
    "tepat_sends_total",
    "Provider answers recorded, by app, channel, provider and what the answer made of the"
    " message: sent, delivered, failed, suppressed (failed, its target suppressed),"
    " outcome_unknown, gave_up (a temporary failure past the retry limits), retry (back to"
    " pending)",
    ["app", "channel", "provider", "outcome"],
)
PROVIDER_ERRORS = _counter(
    "tepat_provider_errors_total",
    "Provider errors by app, channel, provider, kind (throttled: a 429 or the provider's rate"
    " limit; try_again: another temporary failure, 5xx included; refused: permanent) and code",
    ["app", "channel", "provider", "kind", "code"],
)
MAYBE_SENT = _counter(
    "tepat_maybe_sent_total",
    "Messages whose provider request may have been accepted, by category and action:"
    " retried or closed (an answer lost after sending: the category's maybe_sent policy),"
    " retried_5xx (a 5xx the provider documents as retryable; rarely a duplicate)",
    ["category", "action"],
)
BREAKER_STATE = _gauge(
    "tepat_provider_breaker_state",
    "Each provider's circuit breaker in this process: 0 closed, 1 open, 2 half-open",
    ["channel", "provider"],
)
FAILOVERS = _counter(
    "tepat_failovers_total",
    "Sends failed over from a channel's primary provider to its secondary (tepat/domain/"
    "failover.py), by channel, from, to and possible_duplicate: true where the primary's"
    " answer was ambiguous (maybe sent) and the category's maybe_sent policy retries",
    ["channel", "from", "to", "possible_duplicate"],
)
BREAKER_TRANSITIONS = _counter(
    "tepat_provider_breaker_transitions_total",
    "Circuit breaker transitions by channel, provider and the state moved to",
    ["channel", "provider", "to"],
)
# Per device, not per message: a message to an Expo phone and an FCM tablet is one answer
# in tepat_sends_total but a notification to each provider here. The provider label is the
# device's kind (the key of its provider in the runtime), so a provider added to the
# runtime is counted under its own name with no change here.
PUSH_SENDS = _counter(
    "tepat_push_sends_total",
    "Push notifications (one per device) by app, provider (the device's kind: expo, fcm,"
    " apns…) and its answer: accepted, throttled (a 429), try_again (another temporary"
    " failure, 5xx included), refused, not_sent (its lease ran out while it waited)",
    ["app", "provider", "outcome"],
)
# Counted by the provider's token bucket (tepat/adapters/rate_limit.py): provider expo,
# fcm, twilio or smtp.
CRITICAL_RESERVE_USED = _counter(
    "tepat_critical_reserve_used_total",
    "Notifications of critical and safety traffic a provider's rate limiter let through"
    " while other traffic waited at its share (TEPAT_CRITICAL_RESERVE): the reserve in use,"
    " by app and provider",
    ["app", "provider"],
)
NOT_SENT_RETRIES = _counter(
    "tepat_not_sent_retries_total",
    "Messages retried after a request the provider never had or refused (connect error, 429),"
    " by channel and category",
    ["channel", "category"],
)
# Recorded where the sweeper runs (scheduler, serve): each of these messages may have
# reached the provider before its claimant stopped, so each is a possible duplicate.
SENDING_REDRIVEN = _counter(
    "tepat_sending_redriven_total",
    "Messages put back to pending from `sending` without an answer (they may have reached the"
    " provider: the duplicate window), by cause: lease_expired, or restart (the embedded"
    " broker's next start)",
    ["cause"],
)

# Recorded by consumers: each of these messages is left `sending` for the sweeper, so the
# re-driven copy is the only one (tepat/services/sending/lease.py).
LEASE_LAPSED_UNSENT = _counter(
    "tepat_lease_lapsed_unsent_total",
    "Claimed messages a consumer did not send because their lease had run out or nearly"
    " (its renewal failed or was stuck) while they waited; the sweeper re-drives them, by"
    " channel",
    ["channel"],
)

# What a consumer counted at its last heartbeat (consumers/rate_share.py): every process of
# its rate group exports the same figure, so `max` it.
LIVE_CONSUMERS = _gauge(
    "tepat_live_consumers",
    "Consumer processes beating in this process's rate group (itself included) at its last"
    " heartbeat",
)

# --- shared state, refreshed on an interval (scheduler, serve) ---

MESSAGES = _gauge(
    "tepat_messages",
    "Messages in the store by status, category and channel (refreshed every"
    " TEPAT_METRICS_REFRESH_SECONDS)",
    ["status", "category", "channel"],
)
QUEUE_DEPTH = _gauge(
    "tepat_queue_depth",
    "Batches (broker messages, each a list of message ids: not notifications) per queue and"
    " state: ready, scheduled, in_flight, dead_letters (refreshed every"
    " TEPAT_METRICS_REFRESH_SECONDS)",
    ["queue", "state"],
)
OLDEST_DUE_UNSENT = _gauge(
    "tepat_oldest_due_unsent_seconds",
    "Age of the oldest message due but not yet sent (pending or sending, due_at <= now),"
    " 0 when none (refreshed every TEPAT_METRICS_REFRESH_SECONDS)",
)
REFRESHED = _gauge(
    "tepat_gauges_last_refresh_timestamp_seconds",
    "When tepat_messages and tepat_oldest_due_unsent_seconds (source=store) or"
    " tepat_queue_depth (source=broker) last refreshed",
    ["source"],
)

TZDATA = Info("tepat_tzdata", "Time-zone database release in use", registry=REGISTRY)
TZDATA.info({"release": TZDATA_RELEASE})

# The release as a number Prometheus can compare with year() (the stale-tz alert).
TZDATA_YEAR = _gauge("tepat_tzdata_release_year", "Year of the time-zone database release in use")
TZDATA_YEAR.set(int(TZDATA_RELEASE[:4]))

# A refresh that takes longer than this is abandoned; the cached values stay (and
# their timestamp shows their age).
REFRESH_TIMEOUT_SECONDS = 60.0


# The provider behind each channel's adapter: a label of its own, so that a channel given a
# second provider keeps the two apart without renaming a series.
PROVIDERS: dict[str, str] = {
    "push": "expo",
    "inbox": "tepat",
    "email": "smtp",
    "sms": "twilio",
    "webhook": "http",
}
# A code is the leading word of a provider's reason ("twilio_20429: Too Many Requests" ->
# "twilio_20429"): the provider's own bounded vocabulary, never the free text after it
# (addresses, URLs, exception messages would make a series per message).
_CODE = re.compile(r"[A-Za-z0-9_.-]{1,40}")

ErrorKind = Literal["throttled", "try_again", "refused"]


def provider_of(channel: str) -> str:
    return PROVIDERS.get(channel, "unknown")


def breaker_states() -> dict[tuple[str, str], int]:
    """This process's breaker state (0, 1, 2) of each (channel, provider)."""
    return {
        (sample.labels["channel"], sample.labels["provider"]): int(sample.value)
        for family in BREAKER_STATE.collect()
        for sample in family.samples
    }


def counter_totals(counter: Counter, *labels: str) -> dict[tuple[str, ...], int]:
    """This process's totals of a labelled counter by ``labels``, summed over the others."""
    totals: dict[tuple[str, ...], int] = {}
    for family in counter.collect():
        for sample in family.samples:
            if sample.name.endswith("_total"):  # not the _created timestamps
                key = tuple(sample.labels[name] for name in labels)
                totals[key] = totals.get(key, 0) + int(sample.value)
    return totals


def histogram_buckets(histogram: Histogram, label: str) -> dict[str, list[tuple[float, float]]]:
    """This process's cumulative buckets of a labelled histogram by ``label``, summed over
    the others: for each value, ``(upper bound, count at or below it)`` in ascending order,
    ``+Inf`` last."""
    sums: dict[str, dict[float, float]] = {}
    for family in histogram.collect():
        for sample in family.samples:
            if sample.name.endswith("_bucket"):
                by_bound = sums.setdefault(sample.labels[label], {})
                bound = float(sample.labels["le"])
                by_bound[bound] = by_bound.get(bound, 0.0) + sample.value
    return {value: sorted(by_bound.items()) for value, by_bound in sums.items()}


def error_code(reason: str) -> str:
    """The bounded code of a provider's reason (its leading word)."""
    found = _CODE.match(reason)
    return found.group() if found else "unknown"


def count_answer(
    channel: str, category: str, outcome: ChannelOutcome, next_: Next, n: int = 1
) -> None:
    """One provider answer as the recorder reads it (``OutcomeRecorder.next_status``, which
    every channel's answers pass through): what it made of its message, and a not-sent
    retry; ``n`` such answers at once."""
    SENDS.labels(
        app=current_app(),
        channel=channel,
        provider=provider_of(channel),
        outcome=_outcome_label(outcome, next_),
    ).inc(n)
    if isinstance(outcome, TryAgain) and not (outcome.maybe_sent or outcome.server_error):
        NOT_SENT_RETRIES.labels(channel=channel, category=category).inc(n)


def _outcome_label(outcome: ChannelOutcome, next_: Next) -> str:
    if next_.to is MessageStatus.PENDING:
        return "retry"
    if next_.to is not MessageStatus.FAILED:
        return next_.to.value  # sent, delivered
    if next_.reason == OUTCOME_UNKNOWN:
        return "outcome_unknown"
    if isinstance(outcome, TryAgain):
        return "gave_up"
    if isinstance(outcome, Refused) and outcome.suppress is not None:
        return "suppressed"
    return "failed"


def count_push_answer(
    provider: str, answer: TicketOk | TicketError | TryAgain | Rejected | Withheld, n: int = 1
) -> None:
    """What ``provider`` (a device kind) answered for one device's notification (for ``n``
    of them, each counted as one would be); a ticket's error is a provider error too (a
    whole request's is counted where it is seen, once per request:
    :class:`~tepat.services.sending.push_channel.PushBatcher`)."""
    outcome: str
    match answer:
        case TicketOk():
            outcome = "accepted"
        case Withheld():
            outcome = "not_sent"
        case Rejected() | TicketError(permanent=True):
            outcome = "refused"
        case TryAgain(throttled=True):
            outcome = "throttled"
        case _:
            outcome = "try_again"
    PUSH_SENDS.labels(app=current_app(), provider=provider, outcome=outcome).inc(n)
    if isinstance(answer, TicketError):
        for _ in range(n):
            count_provider_error(PUSH, answer, provider)


def count_provider_error(
    channel: str,
    error: TryAgain | Refused | Rejected | TicketError,
    provider: str | None = None,
) -> None:
    """One error a provider answered on ``channel``: for one item (a channel's ``Refused``
    or ``TryAgain``, a push ticket's ``TicketError``), or for a whole push request of up
    to 100 notifications (``TryAgain``, ``Rejected``). ``provider`` is push's device kind
    (the channel's own provider otherwise)."""
    kind: ErrorKind
    match error:
        case TicketError(code=code, permanent=permanent):
            kind = "refused" if permanent else "try_again"
        case Rejected():
            kind, code = "refused", "Rejected"
        case Refused(reason):
            kind, code = "refused", error_code(reason)
        case TryAgain(reason, throttled=throttled):
            kind, code = ("throttled" if throttled else "try_again"), error_code(reason)
    PROVIDER_ERRORS.labels(
        app=current_app(),
        channel=channel,
        provider=provider or provider_of(channel),
        kind=kind,
        code=code[:40],
    ).inc()


def observe_lateness(channel: str, category: str, *seconds: float) -> None:
    """How late each message reached its provider (or the inbox), for the app at work."""
    histogram = LATENESS.labels(app=current_app(), channel=channel, category=category)
    for one in seconds:
        histogram.observe(one)


def count_reserve_used(provider: str, n: float) -> None:
    """``n`` critical notifications the rate limiter let through on the reserve."""
    CRITICAL_RESERVE_USED.labels(app=current_app(), provider=provider).inc(n)


def count_maybe_sent(category: str, action: Literal["retried", "closed", "retried_5xx"]) -> None:
    """One message that may have reached the provider, and whether it was retried or closed."""
    MAYBE_SENT.labels(category=category, action=action).inc()


def count_sending_redriven(cause: Literal["lease_expired", "restart"], n: int) -> None:
    SENDING_REDRIVEN.labels(cause=cause).inc(n)


def exposition() -> bytes:
    """The text exposition of :data:`REGISTRY` (cheap: no I/O)."""
    return generate_latest(REGISTRY)


class _RefreshEvery(Protocol):
    @property
    def metrics_refresh_seconds(self) -> float: ...


class GaugeSource(Protocol):
    """What the gauges are read from (the runtime is one): the message counts, the
    broker's queue depths, and how often to read them."""

    store: Store
    broker: Broker
    categories: Categories
    clock: Clock

    @property
    def queues(self) -> list[str]: ...

    @property
    def settings(self) -> _RefreshEvery: ...


async def refresh_gauges(rt: GaugeSource) -> None:
    """Read message counts and queue depths once into the gauges; a failing source
    keeps its last values."""
    await probe_store(rt.store, rt.clock.now(), "gauges")
    await _refresh_store(rt)
    await _refresh_broker(rt)


async def _refresh_store(rt: GaugeSource) -> None:
    now = rt.clock.now()
    try:
        counts = await asyncio.wait_for(rt.store.count_messages(), REFRESH_TIMEOUT_SECONDS)
        oldest = await asyncio.wait_for(rt.store.oldest_due_unsent(now), REFRESH_TIMEOUT_SECONDS)
    except Exception:
        log.exception("metrics: counting messages failed")
        return
    OLDEST_DUE_UNSENT.set(0.0 if oldest is None else max(0.0, (now - oldest).total_seconds()))
    # Every (status, configured category, channel) gets a value, zero included, so a
    # series does not vanish (and break rate() or alerts) when its count drops to zero.
    by_key = counts.by_status_category_channel
    categories = set(rt.categories.names) | {c for _, c, _ in by_key}
    channels = set(PROVIDERS) | {ch for _, _, ch in by_key}
    MESSAGES.clear()
    for status in MessageStatus:
        for category in sorted(categories):
            for channel in sorted(channels):
                n = by_key.get((status.value, category, channel), 0)
                MESSAGES.labels(status=status.value, category=category, channel=channel).set(n)
    REFRESHED.labels(source="store").set(now.timestamp())


async def _refresh_broker(rt: GaugeSource) -> None:
    try:
        stats = await asyncio.wait_for(rt.broker.stats(rt.queues), REFRESH_TIMEOUT_SECONDS)
    except Exception:
        log.exception("metrics: reading queue depth failed")
        return
    for s in stats:
        for state in ("ready", "scheduled", "in_flight", "dead_letters"):
            QUEUE_DEPTH.labels(queue=s.queue, state=state).set(getattr(s, state))
    REFRESHED.labels(source="broker").set(rt.clock.now().timestamp())


async def run_gauge_refresher(rt: GaugeSource, stop: asyncio.Event) -> None:
    """The one task that reads counts and depths, every ``metrics_refresh_seconds``."""
    while not stop.is_set():
        await refresh_gauges(rt)
        await wait_or_stop(rt.clock, stop, rt.settings.metrics_refresh_seconds)


def metrics_app() -> Starlette:
    """``/metrics`` (and ``/healthz``, for a liveness probe) on a process without an API."""
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import PlainTextResponse, Response
    from starlette.routing import Route

    async def scrape(_: Request) -> Response:
        return Response(exposition(), media_type=CONTENT_TYPE_LATEST)

    async def healthz(_: Request) -> Response:
        return PlainTextResponse("ok")

    return Starlette(routes=[Route("/metrics", scrape), Route("/healthz", healthz)])


# --- the store's health: a probe write, by the gauge refresher and the dashboard ---
# (issue 20: a store that is locked or down shows while it lasts, not only once a
# write has waited out its timeout and failed somewhere). Labelled by who probes, so a
# process that never probes (`tepat consumers`, an unwatched `tepat api`) exports no
# sample rather than a 0 that would read as "down".

STORE_UP = _gauge(
    "tepat_store_up",
    "1 when this process's last probe write reached the store within"
    " STORE_PROBE_TIMEOUT_SECONDS, 0 when it failed or did not finish (locked, down, too"
    " slow), by probe: gauges (each gauge refresh) or dashboard (each dashboard refresh)",
    ["probe"],
)
STORE_PROBE_SECONDS = _gauge(
    "tepat_store_probe_seconds",
    "How long this process's last probe write to the store took, in real seconds (the"
    " timeout when it did not finish), by probe",
    ["probe"],
)
# Far above a healthy write (milliseconds), far below the 30 s a write waits for a lock
# (SQLite's busy_timeout) or a server (PyMongo's selection) before it fails.
STORE_PROBE_TIMEOUT_SECONDS = 2.0
_PROBE_KEY = "store_probe"


class _TakesWrites(Protocol):
    async def set_meta(self, key: str, value: str) -> None: ...


async def probe_store(
    store: _TakesWrites, now: datetime, probe: Literal["gauges", "dashboard"]
) -> tuple[float, str | None]:
    """Write one small record (the meta ``store_probe``) and record how it went in
    :data:`STORE_UP` and :data:`STORE_PROBE_SECONDS`. Returns how long it took, and
    why the store is unavailable (None when the write went through in time)."""
    loop = asyncio.get_running_loop()
    started = loop.time()
    error: str | None = None
    try:
        await asyncio.wait_for(
            store.set_meta(_PROBE_KEY, now.isoformat()), STORE_PROBE_TIMEOUT_SECONDS
        )
    except TimeoutError:
        error = f"a write waited over {STORE_PROBE_TIMEOUT_SECONDS:g} s (locked or overloaded)"
    except Exception as e:
        error = f"{type(e).__name__}: {e}"
    seconds = loop.time() - started
    STORE_UP.labels(probe=probe).set(0 if error else 1)
    STORE_PROBE_SECONDS.labels(probe=probe).set(seconds)
    return seconds, error
