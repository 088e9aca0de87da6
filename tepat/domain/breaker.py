"""The circuit breaker of one provider: stop calling a provider that is down, probe it
after a cool-down, and call it again once it answers. Pure (every call takes ``now``);
:mod:`tepat.adapters.breaker_guard` guards a provider with it.

It opens after ``threshold`` *consecutive* provider-side failures rather than over a
failure ratio: a ratio needs a minimum volume to mean anything, while "N in a row with
no success between" means the same at 1 msg/min and at 1,000 msg/s. It also keeps a
recipient-side temporary answer (an SMTP 452 "mailbox full") from opening it: the other
recipients' successes between reset the count.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import Enum, IntEnum


class BreakerState(IntEnum):
    """The values are the ``tepat_provider_breaker_state`` gauge's."""

    CLOSED = 0
    OPEN = 1
    HALF_OPEN = 2


class Verdict(Enum):
    """What one provider answer says about the provider itself."""

    UP = "up"  # it answered as designed (whatever it said about the recipient)
    DOWN = "down"  # a provider-side failure
    NEITHER = "neither"  # says nothing either way (rate limited, not sent at all)


@dataclass(frozen=True, slots=True)
class BreakerSettings:
    threshold: int = 5  # consecutive provider-side failures that open it
    cool_down: timedelta = timedelta(seconds=30)  # open this long before probing
    probes: int = 1  # calls let through at once while half-open


@dataclass(frozen=True, slots=True)
class Transition:
    from_: BreakerState
    to: BreakerState
    reason: str


@dataclass(frozen=True, slots=True)
class Admission:
    """May a call go out now? ``wait`` is None if so, else the seconds until it is worth
    asking again; ``probe`` marks a call let through while half-open."""

    wait: float | None
    probe: bool = False
    transition: Transition | None = None


class Breaker:
    def __init__(self, settings: BreakerSettings) -> None:
        self.settings = settings
        self.state = BreakerState.CLOSED
        self._failures = 0
        self._opened_at: datetime | None = None
        self._probes_out = 0

    def admit(self, now: datetime) -> Admission:
        """Ask before each call; a call admitted must be followed by :meth:`record`."""
        transition = None
        if self.state is BreakerState.OPEN:
            assert self._opened_at is not None
            half_open_at = self._opened_at + self.settings.cool_down
            if now < half_open_at:
                return Admission(wait=(half_open_at - now).total_seconds())
            transition = self._move(BreakerState.HALF_OPEN, "cool-down over: probing")
        if self.state is BreakerState.HALF_OPEN:
            if self._probes_out >= self.settings.probes:
                # The probe's answer decides soon; asking again after a cool-down at most.
                wait = self.settings.cool_down.total_seconds()
                return Admission(wait=wait, transition=transition)
            self._probes_out += 1
            return Admission(wait=None, probe=True, transition=transition)
        return Admission(wait=None)

    def record(self, verdict: Verdict, now: datetime, *, probe: bool = False) -> Transition | None:
        """The answer of a call :meth:`admit` let through (``probe`` as it said)."""
        if probe:
            self._probes_out = max(0, self._probes_out - 1)
        if self.state is BreakerState.CLOSED:
            if verdict is Verdict.UP:
                self._failures = 0
            elif verdict is Verdict.DOWN:
                self._failures += 1
                if self._failures >= self.settings.threshold:
                    return self._open(now, f"{self._failures} provider-side failures in a row")
            return None
        # Open or half-open: only a probe's answer decides (a call let through before it
        # opened answers about an older provider).
        if not probe or self.state is not BreakerState.HALF_OPEN:
            return None
        if verdict is Verdict.UP:
            self._failures = 0
            return self._move(BreakerState.CLOSED, "probe succeeded")
        if verdict is Verdict.DOWN:
            return self._open(now, "probe failed")
        return None

    def _open(self, now: datetime, reason: str) -> Transition:
        self._opened_at = now
        self._failures = 0
        return self._move(BreakerState.OPEN, reason)

    def _move(self, to: BreakerState, reason: str) -> Transition:
        transition = Transition(self.state, to, reason)
        self.state = to
        if to is not BreakerState.HALF_OPEN:
            self._probes_out = 0
        return transition
