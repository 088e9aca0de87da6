"""The lease on claimed messages, and keeping it while a batch in hand waits.

A claim (``pending -> sending``) stamps ``claimed_at``; a message still ``sending``
a lease later (``TEPAT_SENDING_LEASE_SECONDS``) is taken for a dead consumer's and
re-driven by the sweeper - and may then reach the provider twice. A live consumer
can hold a claimed batch that long without anything being wrong: queued in a
provider's rate limiter behind a burst, paused by a 429's Retry-After, held by the
priority order of the batches in hand. :class:`ClaimsInHand` knows which claims this
process holds and restarts the lease of any held for half of it: one write per batch
per renewal, whatever its size, and none for a batch done sooner (nearly all).

Renewing can fail or get stuck (an overloaded store): then the lease runs out while
the batch is in hand, the sweeper re-drives it, and a send from here would be a
second copy outside the duplicate window. So a claim is sent only while its lease,
as this process knows it, has a safety margin left (:func:`may_still_send`,
:meth:`ClaimsInHand.may_send`, asked right before the provider request); what
is past it is left ``sending`` for the sweeper, whose re-drive is then the only copy.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Protocol

import structlog

from tepat import metrics
from tepat.clock import Clock
from tepat.domain.models import Message

log = structlog.get_logger("tepat.lease")

DEFAULT_LEASE = timedelta(minutes=5)

# The share of the lease that must still be left for a claim to be sent: the sweeper
# judges the lease on another process's clock (skew), and the request itself takes time
# after the check (the rate limiter's last wait, the connection, the provider's answer).
SEND_MARGIN = 0.25


def may_still_send(since: datetime, lease: timedelta, now: datetime) -> bool:
    """Whether a claim made or last renewed at ``since`` may still be sent at ``now``:
    more than :data:`SEND_MARGIN` of its lease is left, so the sweeper cannot have
    re-driven it and will not before the request is answered."""
    return now - since < lease * (1 - SEND_MARGIN)


# Whether a message may still be sent now, on this channel (ClaimsInHand.may_send).
SendGate = Callable[[str, str], bool]


class ClaimRenewals(Protocol):
    async def renew_claims(self, message_ids: Sequence[str], now: datetime) -> int: ...


@dataclass
class _Claim:
    ids: list[str]
    since: datetime  # the claim, or its last renewal


class ClaimsInHand:
    def __init__(self, store: ClaimRenewals, clock: Clock, lease: timedelta = DEFAULT_LEASE):
        self._store = store
        self._clock = clock
        self.lease = lease
        self._held: dict[int, _Claim] = {}
        # The claims holding each message (one, unless re-claimed after its lease ran
        # out here): the gate asks per message, and a scan of every claim in hand per
        # message cost more than the rest of it at 1,200 messages a second.
        self._claims_of: dict[str, list[_Claim]] = {}
        self._keys = itertools.count()

    @property
    def check_seconds(self) -> float:
        """How often :meth:`renew_due` should run: a claim is then renewed between half
        and five eighths of the lease after the last, well before its sending margin
        (:data:`SEND_MARGIN`) even when the renewal loop runs late."""
        return self.lease.total_seconds() / 8

    @contextmanager
    def held(self, claimed: Sequence[Message]) -> Iterator[None]:
        """``claimed`` is this process's until the block ends (recorded or abandoned)."""
        key = next(self._keys)
        claim = self._held[key] = _Claim([m.id for m in claimed], self._clock.now())
        for i in claim.ids:
            self._claims_of.setdefault(i, []).append(claim)
        try:
            yield
        finally:
            del self._held[key]
            for i in claim.ids:
                others = [c for c in self._claims_of.pop(i, ()) if c is not claim]
                if others:
                    self._claims_of[i] = others

    def __len__(self) -> int:
        return len(self._held)

    def lapsed(self, message_ids: Iterable[str]) -> set[str]:
        """Those of ``message_ids`` held here whose lease may no longer be this
        process's (:func:`may_still_send`); a message not held here is not judged."""
        now = self._clock.now()
        return {i for i in message_ids if self._lapsed(i, now)}

    def _lapsed(self, message_id: str, now: datetime) -> bool:
        claims = self._claims_of.get(message_id, ())
        return any(not may_still_send(c.since, self.lease, now) for c in claims)

    def may_send(self, message_id: str, channel: str) -> bool:
        """Asked right before the provider request. No when its lease may no longer be
        this process's (:meth:`lapsed`), counted and logged: it is left ``sending`` and the
        sweeper re-drives it, the only copy."""
        if not self._lapsed(message_id, self._clock.now()):
            return True
        metrics.LEASE_LAPSED_UNSENT.labels(channel).inc()
        log.warning(
            "not sending a message whose lease ran out in hand; the sweeper re-drives it",
            channel=channel,
            message_id=message_id,
            lease_seconds=self.lease.total_seconds(),
        )
        return False

    async def renew_due(self) -> int:
        """Restart the lease of every claim held for half of it; returns how many claims.

        The messages already recorded are left alone by the store (only ``sending``
        ones are renewed). A failed write is retried at the next check, still in time.
        A claim past its sending margin is left alone: the sweeper may have re-driven it
        already, and a renewal landing after that would make its lease look kept. For
        the same reason a renewal answered only past the margin is not counted.
        """
        renewed = 0
        for claim in list(self._held.values()):
            now = self._clock.now()
            if now - claim.since < self.lease / 2 or not may_still_send(
                claim.since, self.lease, now
            ):
                continue
            try:
                await self._store.renew_claims(claim.ids, now)
            except Exception:
                log.exception("could not renew a claim's lease", messages=len(claim.ids))
                continue
            if not may_still_send(claim.since, self.lease, self._clock.now()):
                log.warning(
                    "a claim's lease was renewed too late to count", messages=len(claim.ids)
                )
                continue
            claim.since = now
            renewed += 1
        if renewed:
            log.info("renewed the lease of batches still waiting to be sent", batches=renewed)
        return renewed
