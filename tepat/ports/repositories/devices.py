"""Devices: a user's push bindings, one active per (user, device id) and per token."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from tepat.domain.models import Device

# The deactivated_reason of a binding whose token a newer registration took over.
REPLACED = "replaced"


@dataclass(frozen=True, slots=True)
class DeviceFailure:
    """What ``record_device_outcome`` decided."""

    deactivated: bool
    consecutive_failures: int


class DeviceRepository(Protocol):
    async def register_device(
        self, device: Device, *, from_other_users: bool = True
    ) -> tuple[Device, bool]:
        """Register or rotate: ``device`` becomes the one active binding of its (user,
        ``device_id``) and of its ``push_token``, with a reset failure counter. A token's
        active binding under another user ends ("replaced": the same phone after a new
        login), unless ``from_other_users=False``: then :class:`PushTokenInUse` is raised,
        atomically. Returns the stored device and whether this write activated it (of
        concurrent registrations of one new device, exactly one).
        """

    async def deactivate_device(self, user_id: str, device_id: str, reason: str) -> bool:
        """True if an active device was deactivated."""

    async def deactivate_token(self, push_token: str, reason: str) -> int:
        """Deactivate every active binding of a dead token, and drop it as any device's
        fallback (``fallback_kind`` and ``fallback_token`` cleared, the device's own binding
        untouched); returns how many devices it changed."""

    async def list_devices(self, user_id: str) -> list[Device]: ...

    async def active_devices(self, user_ids: Sequence[str]) -> dict[str, list[Device]]:
        """Active devices per user (users without one are absent)."""

    async def record_device_outcome(
        self, push_token: str, ok: bool, max_failures: int, reason: str
    ) -> DeviceFailure:
        """Success resets the consecutive-failure counter; a failure increments it and
        deactivates the token's active binding at ``max_failures``."""
