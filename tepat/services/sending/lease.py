"""The lease on claimed messages, and keeping it while a batch in hand waits.

A claim (``pending -> sending``) stamps ``claimed_at``; a message still ``sending``
a lease later (``TEPAT_SENDING_LEASE_SECONDS``) is taken for a dead consumer's and
re-driven by the sweeper - and may then reach the provider twice. A live consumer
can hold a claimed batch that long without anything being wrong: queued in a
provider's rate limiter behind a burst, paused by a 429's Retry-After, held by the
priority order of the batches in hand. :class:`ClaimsInHand` knows which claims this
process holds and restarts the lease of any held for half of it: one write per batch
per renewal, whatever its size, and none for a batch done sooner (nearly all).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Protocol

import structlog

from tepat.clock import Clock
from tepat.domain.models import Message

log = structlog.get_logger("tepat.lease")

DEFAULT_LEASE = timedelta(minutes=5)


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
        self._keys = itertools.count()

    @property
    def check_seconds(self) -> float:
        """How often :meth:`renew_due` should run: a claim is then renewed between half
        and three quarters of the lease after the last, never after it ran out."""
        return self.lease.total_seconds() / 4

    @contextmanager
    def held(self, claimed: Sequence[Message]) -> Iterator[None]:
        """``claimed`` is this process's until the block ends (recorded or abandoned)."""
        key = next(self._keys)
        self._held[key] = _Claim([m.id for m in claimed], self._clock.now())
        try:
            yield
        finally:
            del self._held[key]

    def __len__(self) -> int:
        return len(self._held)

    async def renew_due(self) -> int:
        """Restart the lease of every claim held for half of it; returns how many claims.

        The messages already recorded are left alone by the store (only ``sending``
        ones are renewed). A failed write is retried at the next check, still in time.
        """
        renewed = 0
        for claim in list(self._held.values()):
            now = self._clock.now()
            if now - claim.since < self.lease / 2:
                continue
            try:
                await self._store.renew_claims(claim.ids, now)
            except Exception:
                log.exception("could not renew a claim's lease", messages=len(claim.ids))
                continue
            claim.since = now
            renewed += 1
        if renewed:
            log.info("renewed the lease of batches still waiting to be sent", batches=renewed)
        return renewed
