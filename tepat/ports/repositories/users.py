"""Users: who gets reminded, where and when, and the planning marks of a plan run."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from tepat.domain.models import User


@dataclass(frozen=True, slots=True)
class PlanMark:
    """What a plan run knows it planned for one user: every occurrence whose nominal
    instant lies in ``[plan_from, plan_next_at)``, under ``fingerprint`` (categories and
    rules), from the user's state at change stamp ``stamp``."""

    user_id: str
    stamp: int
    plan_from: datetime
    plan_next_at: datetime
    fingerprint: str


@dataclass(frozen=True, slots=True)
class PlanTarget:
    """A user as a plan run reads them: the user, their change stamp at that read,
    and their planning mark if one is standing (none after any change)."""

    user: User
    stamp: int
    mark: PlanMark | None = None


class UserRepository(Protocol):
    async def upsert_user(self, user: User) -> tuple[User, bool]:
        """Create or replace; returns the stored user and whether this write inserted it
        (of concurrent creates, one). Keeps ``created_at``; ``plan_version`` never goes
        down."""

    async def get_user(self, user_id: str) -> User | None: ...

    async def get_users(self, user_ids: Sequence[str]) -> dict[str, User]: ...

    def iter_users(self, batch_size: int = 1000) -> AsyncIterator[list[User]]:
        """All users in ``user_id`` order, a page at a time (keyset, flat memory)."""

    # Planning marks (tepat/services/planning/creator.py, docs/ARCHITECTURE.md "Plan runs").
    # Every user carries a change stamp: any write that can change what planning
    # makes of them (their zone, quiet hours, enabled flag or plan version; a
    # reminder of theirs inserted, replaced or deleted) increments it and clears
    # their mark, in the same write, whoever the writer is.

    def users_to_plan(
        self,
        start: datetime,
        end: datetime,
        fingerprint: str,
        batch_size: int = 1000,
        after: str = "",
        until: str | None = None,
    ) -> AsyncIterator[list[PlanTarget]]:
        """Users whose ``user_id`` is in ``(after, until]`` and whose standing mark does
        not cover ``[start, end)`` under ``fingerprint``, in ``user_id`` order, a page at
        a time (keyset, flat memory)."""

    async def set_plan_marks(self, marks: Sequence[PlanMark]) -> int:
        """Write each mark only if its user's change stamp still equals ``mark.stamp``
        (compare-and-set: a mark computed from a read older than a change never
        sticks). Returns how many were written."""

    async def user_id_bounds(self, parts: int) -> list[str]:
        """Up to ``parts - 1`` user ids splitting all users, in order, into ``parts``
        ranges of about equal size (``(after, until]`` for :meth:`users_to_plan`)."""
