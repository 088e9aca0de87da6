"""Logs: one renderer for everything a process writes to stderr.

structlog's own events and the standard library's loggers (uvicorn, stomp.py,
PyMongo, httpx, asyncio, warnings) all go through one handler whose
:class:`structlog.stdlib.ProcessorFormatter` renders JSON lines when stderr is
not a terminal (readable lines when it is), so a log shipper reads one format.

HTTP access lines (``uvicorn.access``) have their own level
(``TEPAT_ACCESS_LOG_LEVEL``, default ``INFO``): requests to the probe and
scrape paths are logged at ``DEBUG``, so liveness/readiness probes and
Prometheus scrapes never flood the log while every API request stays visible.

With tracing on (``OTEL_TRACES_EXPORTER``, :mod:`tepat.tracing`), which this also
starts, every line written inside a span carries its ``trace_id``; a line about one
message carries that message's (:mod:`tepat.services.sending.message_log`).

No line carries a credential found in a URL: query parameters whose name (however it
is spelled: ``access%5Ftoken`` is ``access_token``) says token, key, secret, signature or
password, and the token of a one-click unsubscribe path (``/u/<token>``), are written
``REDACTED`` in access lines and in every other line, structlog's or a library's.
"""

from __future__ import annotations

import functools
import json
import logging
import re
import sys
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from types import TracebackType
from typing import Any
from urllib.parse import unquote_plus

import structlog
from structlog.typing import EventDict, Processor, WrappedLogger

from tepat import tracing

ACCESS_LOGGER = "uvicorn.access"
# Paths hit by orchestrators and Prometheus every few seconds.
PROBE_PATHS = frozenset({"/healthz", "/readyz", "/metrics"})
# Libraries that log one INFO line per outgoing request (httpx: every Expo call).
CHATTY_LOGGERS = ("httpx", "httpcore")


def configure_logging(
    level: str = "INFO", json: bool | None = None, access_level: str = "INFO"
) -> None:
    """Route every logger through one handler on stderr, and start tracing if the
    environment asks for it; idempotent."""
    tracing.configure_from_environment()
    as_json = (not sys.stderr.isatty()) if json is None else json
    threshold = logging.getLevelName(level)
    shared: list[Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        UtcTimeStamper(),
        add_trace_id,
    ]
    structlog.configure(
        processors=[
            *shared,
            structlog.processors.StackInfoRenderer(),
            structlog.stdlib.ProcessorFormatter.wrap_for_formatter,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(threshold),
        logger_factory=structlog.stdlib.LoggerFactory(),
        cache_logger_on_first_use=True,
    )
    final: list[Processor] = (
        [structlog.processors.format_exc_info, structlog.processors.JSONRenderer(_json_dumps)]
        if as_json
        else [structlog.dev.ConsoleRenderer()]
    )
    formatter = structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=[*shared, _access_fields],
        processors=[
            structlog.stdlib.ProcessorFormatter.remove_processors_meta,
            redact_secrets,
            *final,
        ],
        pass_foreign_args=True,
    )
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(formatter)
    root = logging.getLogger()
    root.handlers = [handler]
    root.setLevel(threshold)
    for name in CHATTY_LOGGERS:
        logging.getLogger(name).setLevel(threshold if threshold <= logging.DEBUG else "WARNING")
    access = logging.getLogger(ACCESS_LOGGER)
    access.setLevel(access_level)
    access.propagate = True
    access.filters = [f for f in access.filters if not isinstance(f, AccessLevelFilter)]
    access.addFilter(AccessLevelFilter(logging.getLevelName(access_level)))
    logging.captureWarnings(True)
    if as_json:
        # A traceback printed by the interpreter would be the one non-JSON line.
        sys.excepthook = _log_uncaught
        threading.excepthook = _log_uncaught_in_thread


class AccessLevelFilter(logging.Filter):
    """uvicorn logs every request at INFO: probes and scrapes become DEBUG, and lines
    below the access-log level are dropped."""

    def __init__(self, threshold: int) -> None:
        super().__init__(ACCESS_LOGGER)
        self.threshold = threshold

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if isinstance(args, tuple) and len(args) == 5:
            full = str(args[2])
            path = full.split("?", 1)[0]
            if path in PROBE_PATHS:
                record.levelno, record.levelname = logging.DEBUG, "DEBUG"
            # The inbox stream takes a user's JWT as ?access_token= (browsers'
            # EventSource cannot send headers), and /u/<token> is an unsubscribe link's key.
            record.args = (args[0], args[1], redact(full), *args[3:])
        return record.levelno >= self.threshold


REDACTED = "REDACTED"
# name=value in a query string (or any text holding a URL); the name is checked decoded.
_QUERY_PARAM = re.compile(r"([?&;])([^=&;#\s]+)=([^&;#\s\"'<>]*)")
_SECRET_WORDS = ("token", "secret", "signature", "password", "passwd", "credential")
_SECRET_NAMES = frozenset({"key", "sig", "auth", "code", "session"})
# /u/<token> as the first segment of a path, alone or after a URL's host.
_UNSUBSCRIBE_PATH = re.compile(r"((?:^|[\s\"'(<=]|://[^/\s?#]+)/u/)[^/?#\s\"'<>]+")


def _secret_param(name: str) -> bool:
    decoded = unquote_plus(unquote_plus(name)).strip().lower().replace("-", "_")
    return (
        decoded in _SECRET_NAMES
        or decoded.endswith("key")
        or any(word in decoded for word in _SECRET_WORDS)
    )


def _redact_param(match: re.Match[str]) -> str:
    sep, name, _value = match.groups()
    return f"{sep}{name}={REDACTED}" if _secret_param(name) else match.group(0)


def redact(text: str) -> str:
    """``text`` with the credentials a URL may carry replaced: secret query parameters'
    values (by their decoded name) and unsubscribe tokens in ``/u/<token>`` paths."""
    if "?" in text or "&" in text:
        text = _QUERY_PARAM.sub(_redact_param, text)
    if "/u/" in text:
        text = _UNSUBSCRIBE_PATH.sub(rf"\1{REDACTED}", text)
    return text


def redact_secrets(_: WrappedLogger, __: str, event_dict: EventDict) -> EventDict:
    """Every line's text fields through :func:`redact`, whoever logged it."""
    for name, value in event_dict.items():
        if isinstance(value, str):
            # redact's own tests, here: most fields hold nothing it looks for, and a call
            # per field was a sixth of rendering a line (a ``send recorded`` per message).
            if "?" in value or "&" in value or "/u/" in value:
                event_dict[name] = redact(value)
        elif isinstance(value, (tuple, list)) and any(isinstance(v, str) for v in value):
            event_dict[name] = [redact(v) if isinstance(v, str) else v for v in value]
    return event_dict


@functools.lru_cache(maxsize=4)
def _json_encoder(default: Callable[[Any], Any]) -> json.JSONEncoder:
    return json.JSONEncoder(default=default)


def _json_dumps(obj: Any, *, default: Callable[[Any], Any]) -> str:
    """``json.dumps(obj, default=default)``, its encoder made once (not per line)."""
    return _json_encoder(default).encode(obj)


class UtcTimeStamper:
    """``timestamp`` as structlog's ``TimeStamper(fmt="iso", utc=True)`` writes it
    (``2026-12-03T03:11:23.614608Z``; no fraction at a whole second), the date and time
    of a second formatted once. Why: its datetime made and formatted per line was a fifth
    of rendering a line, and a consumer writes one (``send recorded``) per message sent."""

    def __init__(self) -> None:
        # (second, its text): one reference, swapped whole, so threads logging at once
        # never pair a second with another's text.
        self._second: tuple[int, str] = (-1, "")

    def __call__(self, _: WrappedLogger, __: str, event_dict: EventDict) -> EventDict:
        second, micro = divmod(time.time_ns() // 1000, 1_000_000)  # datetime.now's clock
        cached = self._second
        if cached[0] != second:
            text = datetime.fromtimestamp(second, UTC).isoformat().removesuffix("+00:00")
            cached = self._second = (second, text)
        event_dict["timestamp"] = f"{cached[1]}.{micro:06d}Z" if micro else f"{cached[1]}Z"
        return event_dict


def add_trace_id(_: WrappedLogger, __: str, event_dict: EventDict) -> EventDict:
    """The ``trace_id`` of the span in progress, unless the line names its own (a
    message's, whose trace may not be the batch's it was logged in)."""
    if "trace_id" not in event_dict and (traceparent := tracing.current_traceparent()):
        trace_id = tracing.trace_id_of(traceparent)
        if trace_id is not None:
            event_dict["trace_id"] = trace_id
    return event_dict


def _access_fields(_: WrappedLogger, __: str, event_dict: EventDict) -> EventDict:
    """An access line's parts as fields (client, method, path, status), not only prose."""
    args = event_dict.pop("positional_args", None)
    record = event_dict.get("_record")
    if (
        record is not None
        and record.name == ACCESS_LOGGER
        and isinstance(args, tuple)
        and len(args) == 5
    ):
        client, method, path, _version, status = args
        event_dict.update(client=client, method=method, path=path, status=status)
    return event_dict


def _log_uncaught(
    exc_type: type[BaseException], exc: BaseException, tb: TracebackType | None
) -> None:
    if issubclass(exc_type, KeyboardInterrupt):
        sys.__excepthook__(exc_type, exc, tb)
        return
    logging.getLogger("tepat").critical("uncaught exception", exc_info=(exc_type, exc, tb))


def _log_uncaught_in_thread(args: threading.ExceptHookArgs) -> None:
    if args.exc_type is SystemExit:
        return
    logging.getLogger("tepat").critical(
        "uncaught exception in thread %s",
        getattr(args.thread, "name", "?"),
        exc_info=(args.exc_type, args.exc_value, args.exc_traceback),  # type: ignore[arg-type]
    )
