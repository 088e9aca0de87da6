"""The failover rule (tepat/domain/failover.py): only the provider's own failure fails
over, and an ambiguous answer only where its category retries such answers."""

from __future__ import annotations

import pytest

from tepat.domain.breaker import Verdict
from tepat.domain.categories import MaybeSentPolicy
from tepat.domain.failover import Failover, failover_of

CLOSE, RETRY = MaybeSentPolicy.CLOSE, MaybeSentPolicy.RETRY


@pytest.mark.parametrize(
    ("verdict", "maybe_sent", "policy", "expected"),
    [
        # connect error, 5xx, "unavailable", the breaker open: nothing went out
        (Verdict.DOWN, False, CLOSE, Failover.GO),
        (Verdict.DOWN, False, RETRY, Failover.GO),
        # the answer was lost after sending: the category's policy decides
        (Verdict.DOWN, True, CLOSE, Failover.STAY),
        (Verdict.DOWN, True, RETRY, Failover.GO_MAYBE_TWICE),
        # accepted, or a recipient's refusal: the provider is up
        (Verdict.UP, False, RETRY, Failover.STAY),
        (Verdict.UP, True, RETRY, Failover.STAY),
        # a 429, or nothing sent at all (a lapsed lease): says nothing of the provider
        (Verdict.NEITHER, False, RETRY, Failover.STAY),
        (Verdict.NEITHER, True, RETRY, Failover.STAY),
    ],
)
def test_failover_of(
    verdict: Verdict, maybe_sent: bool, policy: MaybeSentPolicy, expected: Failover
) -> None:
    assert failover_of(verdict, maybe_sent=maybe_sent, policy=policy) is expected
