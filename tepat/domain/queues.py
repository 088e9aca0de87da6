"""Which broker queue a message waits on (:func:`queue_for`): one per category for push,
one per (channel, priority class) for the other channels (a campaign of 100k e-mails
never sits in front of a password reset), a critical queue per channel, and one for
webhook deliveries. A pure function of the message, so publishers and consumers agree
without sharing state; :func:`queue_priority` orders the consumer's batches in hand.
"""

from __future__ import annotations

from collections.abc import Iterable

from tepat.domain.categories import Categories, CategoryPolicy
from tepat.domain.models import Message

PUSH = "push"
WEBHOOK = "webhook"
WEBHOOK_QUEUE = "tepat.webhooks"
CRITICAL = "critical"
BULK = "bulk"
NORMAL = "normal"
PRIORITY_CLASSES = (CRITICAL, NORMAL, BULK)
SAFETY = "safety"

# PriorityHold's order: lower first. Categories use 0..n (safety 0); critical goes before
# all of them, bulk and webhook deliveries after.
_CRITICAL_RANK = -1
_LAST_RANK = 1_000


def queue_for(policy: CategoryPolicy, channel: str, priority: str | None) -> str:
    if channel == WEBHOOK:
        return WEBHOOK_QUEUE
    klass = priority if priority in PRIORITY_CLASSES else NORMAL
    if klass == CRITICAL:
        return f"tepat.{channel}.{CRITICAL}"
    if channel == PUSH:
        return policy.queue_name
    return f"tepat.{channel}.{klass}"


def queues_for_channels(categories: Categories, channels: Iterable[str]) -> list[str]:
    """Every queue of ``channels``, highest priority first (the consumers' subscriptions)."""
    chosen = list(dict.fromkeys(channels))
    return [
        *(f"tepat.{c}.{CRITICAL}" for c in chosen if c != WEBHOOK),
        *(categories.queues() if PUSH in chosen else []),
        *(f"tepat.{c}.{k}" for c in chosen if c not in (PUSH, WEBHOOK) for k in (NORMAL, BULK)),
        *([WEBHOOK_QUEUE] if WEBHOOK in chosen else []),
    ]


def queue_priority(queue: str, categories: Categories) -> int:
    if queue.endswith(f".{CRITICAL}"):
        return _CRITICAL_RANK
    policy = categories.by_queue().get(queue)
    if policy is not None:
        return policy.priority
    if queue.endswith(f".{NORMAL}"):
        return max((p.priority for p in categories), default=0)
    return _LAST_RANK


def may_use_critical_reserve(message: Message) -> bool:
    """Whether a message may use the share of a provider's rate that other traffic never
    takes: a critical event's, or the ``safety`` category's (ahead of every category in
    the queues, and at the provider too)."""
    return message.priority == CRITICAL or message.category == SAFETY


def queue_may_use_critical_reserve(queue: str, categories: Categories) -> bool:
    """Whether every message on ``queue`` may (:func:`may_use_critical_reserve`): a
    channel's critical queue, or push's queue of the ``safety`` category."""
    policy = categories.by_queue().get(queue)
    return queue.endswith(f".{CRITICAL}") or (policy is not None and policy.name == SAFETY)
