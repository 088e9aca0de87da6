"""The lines an operator follows one message by: each names its message, user and channel.

``grep`` or ``jq`` for a ``message_id`` finds every one (docs/guides/operations.md,
"Follow one message").
"""

from __future__ import annotations

from structlog.typing import FilteringBoundLogger


def log_message(
    log: FilteringBoundLogger,
    event: str,
    message_id: str,
    user_id: str,
    channel: str,
    **fields: object,
) -> None:
    """One INFO line about one message; fields that are None are left out, so a line
    holds only what happened (no ``reason`` on a send that went through)."""
    log.info(
        event,
        message_id=message_id,
        user_id=user_id,
        channel=channel,
        **{name: value for name, value in fields.items() if value is not None},
    )
