"""Failover: whether one provider's answer may be sent again through a channel's
secondary provider (a second relay or Twilio account, a device's other push token).

Only the provider's own failure fails over (:attr:`Verdict.DOWN`): a recipient's refusal
would be refused by the secondary too, and a 429 is the provider working as designed.
An answer that may have been sent already fails over only where the category retries
such answers anyway, as a possible duplicate.
"""

from __future__ import annotations

import enum

from tepat.domain.breaker import Verdict
from tepat.domain.categories import MaybeSentPolicy


class Failover(enum.Enum):
    STAY = "stay"  # the primary's answer stands
    GO = "go"  # sent again through the secondary: nothing can be duplicated
    GO_MAYBE_TWICE = "go_maybe_twice"  # sent again, and the primary may have sent it too


def failover_of(verdict: Verdict, *, maybe_sent: bool, policy: MaybeSentPolicy) -> Failover:
    """What to do with an answer the primary gave (``verdict``: :func:`verdict_of`'s);
    ``policy`` is the message's category's ``maybe_sent`` policy."""
    if verdict is not Verdict.DOWN:
        return Failover.STAY
    if not maybe_sent:
        return Failover.GO
    return Failover.GO_MAYBE_TWICE if policy is MaybeSentPolicy.RETRY else Failover.STAY
