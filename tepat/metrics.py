"""Prometheus metrics (served at ``/metrics``).

Message counts by status and queue depth are gauges refreshed at scrape time
from the store and broker (the source of truth), not counters kept in memory,
so they are right whichever process did the work.
"""

from __future__ import annotations

from typing import Literal

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Info

from tepat.domain.zones import TZDATA_RELEASE

REGISTRY = CollectorRegistry(auto_describe=True)

MESSAGES = Gauge(
    "tepat_messages", "Messages by status and category", ["status", "category"], registry=REGISTRY
)
QUEUE_DEPTH = Gauge(
    "tepat_queue_depth", "Broker queue depth", ["queue", "state"], registry=REGISTRY
)
SEND_LATENCY = Histogram(
    "tepat_send_latency_seconds",
    "Duration of one push provider request",
    buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
    registry=REGISTRY,
)
LATENESS = Histogram(
    "tepat_send_lateness_seconds",
    "Time from a message's scheduled instant to the provider accepting it",
    ["category"],
    buckets=(0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 300, 1800),
    registry=REGISTRY,
)
PROVIDER_ERRORS = Counter(
    "tepat_provider_errors", "Push provider errors by code", ["code"], registry=REGISTRY
)
MAYBE_SENT = Counter(
    "tepat_maybe_sent",
    "Messages whose provider request may have been accepted (read timeout, 5xx after sending),"
    " by category and what the category's maybe_sent policy did",
    ["category", "action"],
    registry=REGISTRY,
)
NOT_SENT_RETRIES = Counter(
    "tepat_not_sent_retries",
    "Messages retried after a request the provider never had or refused (connect error, 429)",
    ["category"],
    registry=REGISTRY,
)


def count_maybe_sent(category: str, action: Literal["retried", "closed"]) -> None:
    """One message with an unknown outcome, and whether it was retried or closed."""
    MAYBE_SENT.labels(category=category, action=action).inc()


def count_not_sent_retry(category: str) -> None:
    NOT_SENT_RETRIES.labels(category=category).inc()


TZDATA = Info("tepat_tzdata", "Time-zone database release in use", registry=REGISTRY)

# The release as a number Prometheus can compare with year() (the stale-tz alert).
TZDATA_YEAR = Gauge(
    "tepat_tzdata_release_year", "Year of the time-zone database release in use", registry=REGISTRY
)
TZDATA_YEAR.set(int(TZDATA_RELEASE[:4]))
