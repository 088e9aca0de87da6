"""Prometheus metrics (served at ``/metrics``).

Message counts by status and queue depth are gauges refreshed at scrape time
from the store and broker (the source of truth), not counters kept in memory,
so they are right whichever process did the work.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Info

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
TZDATA = Info("tepat_tzdata", "Time-zone database release in use", registry=REGISTRY)
