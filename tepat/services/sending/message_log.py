"""The lines an operator follows one message by: each names its message, user and channel,
and, with tracing on, its trace (each line is also a span in that trace, tepat/tracing.py).

``grep`` or ``jq`` for a ``message_id`` or ``trace_id`` finds every one
(docs/guides/operations.md, "Follow one message").
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import structlog
from structlog.stdlib import ProcessorFormatter
from structlog.typing import FilteringBoundLogger

from tepat import tracing

Line = dict[str, object]


def message_line(
    event: str,
    message_id: str,
    user_id: str,
    channel: str,
    trace_parent: str | None,
    **fields: object,
) -> Line:
    """The fields of one line about one message (its span in the message's trace is
    started here); fields that are None are left out, so a line holds only what
    happened (no ``reason`` on a send that went through)."""
    line: Line = {
        "message_id": message_id,
        "user_id": user_id,
        "channel": channel,
        **{name: value for name, value in fields.items() if value is not None},
    }
    if trace_parent:  # without one there is neither a span nor a trace id to add
        tracing.message_event(event, trace_parent, **line)
        trace_id = tracing.trace_id_of(trace_parent)
        if trace_id is not None:
            line["trace_id"] = trace_id
    return line


def log_lines(log: FilteringBoundLogger, event: str, lines: Sequence[Line]) -> None:
    """One INFO line ``event`` per item of ``lines``, each as ``log.info(event, **line)``
    writes it, in one write.

    A line through structlog and the standard library's handler costs about 100 us (two
    ``LogRecord``, the caller's frame looked up, a write and a flush): per message sent,
    it was a tenth of the consumer's CPU. Where the process logs as
    :func:`tepat.logging.configure_logging` sets it up (structlog's processors, then the
    one handler's :class:`~structlog.stdlib.ProcessorFormatter`), the same processors
    render each line here, without the records. Any other set-up (a test capturing the
    lines, a handler or filter of its own) gets each line the ordinary way.
    """
    if not lines or not log.is_enabled_for(logging.INFO):
        return
    bound: Any = log.bind()
    route = _plain_route(bound)
    if route is None:
        for line in lines:
            log.info(event, **line)
        return
    handler, formatter = route
    std_logger = bound._logger
    pre_chain = bound._processors[:-1]  # its last hands the line to the standard library
    as_formatted = std_logger if formatter.logger is None else formatter.logger
    rendered = []
    for line in lines:
        event_dict: Any = {**bound._context, **line, "event": event}
        try:
            for proc in pre_chain:
                event_dict = proc(std_logger, "info", event_dict)
        except structlog.DropEvent:
            continue
        event_dict.update(_record=None, _from_structlog=True)  # as the formatter adds them
        for proc in formatter.processors:
            event_dict = proc(as_formatted, "info", event_dict)
        rendered.append(event_dict + handler.terminator)
    handler.acquire()
    try:
        handler.stream.write("".join(rendered))
        handler.flush()
    except Exception:  # as the handler's own write: reported on stderr, never raised
        handler.handleError(logging.makeLogRecord({"msg": event}))
    finally:
        handler.release()


def _plain_route(bound: Any) -> tuple[logging.StreamHandler[Any], ProcessorFormatter] | None:
    """The handler and formatter an INFO line of ``bound`` reaches, when that is all it
    reaches: structlog hands it to a standard library logger that filters nothing and has
    one stream handler in all, rendering with a :class:`ProcessorFormatter`."""
    processors = getattr(bound, "_processors", None)
    std_logger = getattr(bound, "_logger", None)
    if (
        not processors
        or processors[-1] is not ProcessorFormatter.wrap_for_formatter
        or not isinstance(std_logger, logging.Logger)
        or not std_logger.isEnabledFor(logging.INFO)
    ):
        return None
    handlers: list[logging.Handler] = []
    current: logging.Logger | None = std_logger
    while current is not None:
        if current.filters:
            return None
        handlers.extend(current.handlers)
        current = current.parent if current.propagate else None
    if len(handlers) != 1:
        return None
    [handler] = handlers
    if (
        type(handler) is not logging.StreamHandler
        or handler.filters
        or handler.level > logging.INFO
        or not isinstance(handler.formatter, ProcessorFormatter)
    ):
        return None
    return handler, handler.formatter
