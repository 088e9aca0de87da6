"""How urgently, and for how long, a push provider is to deliver a message: the one rule
for every push provider's priority (APNs 10 or 5, FCM high or normal) and time to live."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from tepat.domain.categories import CategoryPolicy, QuietPolicy
from tepat.domain.models import Message
from tepat.domain.queues import BULK


@dataclass(frozen=True, slots=True)
class PushTerms:
    priority: str  # "high": now; "normal": the device may hold it back to save power
    ttl_seconds: int  # 0: now or never


def push_terms(message: Message, policy: CategoryPolicy, now: datetime) -> PushTerms:
    """High priority unless the message is bulk in a category that keeps quiet hours.
    The time to live is what is left of the missed window: a provider holding it for an
    offline device never delivers it later than it would have been skipped as missed.
    """
    urgent = message.priority != BULK or policy.quiet_hours is QuietPolicy.BYPASS
    left = message.scheduled_at + policy.missed_window - now
    return PushTerms("high" if urgent else "normal", max(0, int(left.total_seconds())))
