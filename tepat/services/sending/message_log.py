"""The lines an operator follows one message by: each names its message, user and channel,
and, with tracing on, its trace (each line is also a span in that trace, tepat/tracing.py).

``grep`` or ``jq`` for a ``message_id`` or ``trace_id`` finds every one
(docs/guides/operations.md, "Follow one message").
"""

from __future__ import annotations

from structlog.typing import FilteringBoundLogger

from tepat import tracing


def log_message(
    log: FilteringBoundLogger,
    event: str,
    message_id: str,
    user_id: str,
    channel: str,
    trace_parent: str | None,
    **fields: object,
) -> None:
    """One INFO line about one message; fields that are None are left out, so a line
    holds only what happened (no ``reason`` on a send that went through)."""
    line = {
        "message_id": message_id,
        "user_id": user_id,
        "channel": channel,
        **{name: value for name, value in fields.items() if value is not None},
    }
    tracing.message_event(event, trace_parent, **line)
    trace_id = tracing.trace_id_of(trace_parent)
    if trace_id is not None:
        line["trace_id"] = trace_id
    log.info(event, **line)
