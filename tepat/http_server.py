"""The HTTP server's defences against slow and idle clients: uvicorn's httptools protocol,
guarded.

uvicorn closes a connection left idle *after* a response (``timeout_keep_alive``), but
not one still sending its request: a client that sends a request line and then a header
byte every few seconds (slowloris), or half a request and then nothing, keeps its
connection, its buffers and a file descriptor for as long as it likes, since each byte
cancels the keep-alive timer and nothing else is armed. So here:

- a request's headers must be complete within ``header_seconds`` of its first byte (or
  of the connection opening), and its body within ``body_seconds`` after the headers;
  trickling bytes does not extend either; past it the connection is closed unanswered;
- beyond ``max_connections`` open connections, a new one is closed at once;
- those closes are counted and reported in one log line at most every
  :data:`LOG_EVERY_SECONDS`, never a line (or a traceback) per connection; uvicorn's and
  asyncio's own per-connection warnings are limited the same way (:class:`OncePerWhile`).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import socket
import time
from typing import TYPE_CHECKING, Any

import structlog
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

if TYPE_CHECKING:
    from tepat.config import Settings

LOG_EVERY_SECONDS = 10.0
log = structlog.get_logger("tepat.http")


class _Refusals:
    """Counts slow or surplus connections closed, and says so now and then."""

    def __init__(self) -> None:
        self._counts: dict[str, int] = {}
        self._last = float("-inf")

    def note(self, why: str) -> None:
        self._counts[why] = self._counts.get(why, 0) + 1
        now = time.monotonic()
        if now - self._last >= LOG_EVERY_SECONDS:
            self._last = now
            log.warning("closed slow or surplus HTTP connections", **self._counts)
            self._counts = {}


def guarded_http_for(settings: Settings) -> type[HttpToolsProtocol]:
    """uvicorn's httptools protocol with the configured limits above (pass it as
    ``uvicorn.Config(http=...)``), and uvicorn's and asyncio's per-connection warnings
    limited to one line per message per while."""
    for name in ("uvicorn.error", "asyncio"):
        logger = logging.getLogger(name)
        if not any(isinstance(f, OncePerWhile) for f in logger.filters):
            logger.addFilter(OncePerWhile())
    header_seconds = settings.http_header_timeout_seconds
    body_seconds = settings.http_body_timeout_seconds
    max_connections = settings.http_max_connections
    refusals = _Refusals()

    class GuardedHttpToolsProtocol(HttpToolsProtocol):
        """The deadlines follow the parser's callbacks: a message begun owes its headers,
        headers complete owe the body until the message is."""

        _waiting_for: str | None = None
        _timer: asyncio.TimerHandle | None = None

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            _send_without_delay(transport)
            if len(self.connections) > max_connections:
                refusals.note("over_max_connections")
                transport.close()
                return
            self._expect("headers", header_seconds)

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            if self._waiting_for is None and (self.cycle is None or self.cycle.response_complete):
                # bytes while idle that began no message yet (blank lines): uvicorn
                # disarmed its keep-alive timer for them, so this deadline holds instead
                self._expect("headers", header_seconds)

        def on_message_begin(self) -> None:
            super().on_message_begin()
            self._expect("headers", header_seconds)  # the next request's first byte

        def on_headers_complete(self) -> None:
            super().on_headers_complete()
            self._expect("body", body_seconds)

        def on_message_complete(self) -> None:
            # the request is in (uvicorn's keep-alive timer covers the idle time after)
            self._expect(None, 0.0)
            super().on_message_complete()

        def connection_lost(self, exc: Exception | None) -> None:
            self._expect(None, 0.0)
            super().connection_lost(exc)

        def _expect(self, what: str | None, seconds: float) -> None:
            if what is not None and what == self._waiting_for:
                return  # a trickle of bytes does not move the deadline
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            self._waiting_for = what
            if what is not None:
                self._timer = self.loop.call_later(seconds, self._too_slow)

        def _too_slow(self) -> None:
            self._timer = None
            if self._waiting_for is not None and not self.transport.is_closing():
                refusals.note(f"slow_{self._waiting_for}")
                self.transport.close()

    return GuardedHttpToolsProtocol


def _send_without_delay(transport: asyncio.Transport) -> None:
    """TCP_NODELAY on the connection's socket. asyncio sets it only on sockets whose
    ``proto`` is TCP, and a listening socket from ``socket.create_server`` (``tepat
    serve``'s) or uvicorn's own (``--workers``) has proto 0: uvicorn writes a response's
    head and body apart, so Nagle held the body until the client's delayed ACK, 40 ms
    a request on a keep-alive connection (at most ~22 requests/s per connection)."""
    sock = transport.get_extra_info("socket")
    if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


# What `tepat api --workers N` passes uvicorn as ``http``: uvicorn starts each worker in
# a spawned process and sends it the config pickled, which a class made inside
# guarded_http_for cannot be; a name is looked up in the worker instead.
WORKERS_HTTP_PROTOCOL = "tepat.http_server:guarded_http_from_settings"


def guarded_http_from_settings(**kwargs: Any) -> HttpToolsProtocol:
    """A connection of :func:`guarded_http_for`'s protocol, its limits from this process's
    settings (a worker reads the same environment as the command that started it)."""
    return _protocol_from_settings()(**kwargs)


@functools.cache
def _protocol_from_settings() -> type[HttpToolsProtocol]:
    from tepat.config import load_settings

    return guarded_http_for(load_settings())


class OncePerWhile(logging.Filter):
    """Lets a record through once per message per :data:`LOG_EVERY_SECONDS` (with how many were
    held back since): one line instead of one per connection when many misbehave."""

    def __init__(self) -> None:
        super().__init__()
        self._seen: dict[Any, tuple[float, int]] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno >= logging.ERROR and record.exc_info is None:
            key: Any = (record.name, record.msg)
        else:
            key = (record.name, record.msg, record.levelno)
        now = time.monotonic()
        last, held = self._seen.get(key, (float("-inf"), 0))
        if now - last < LOG_EVERY_SECONDS:
            self._seen[key] = (last, held + 1)
            return False
        self._seen[key] = (now, 0)
        if len(self._seen) > 1000:  # messages are templates; this only bounds the odd case
            self._seen = {key: (now, 0)}
        if held:
            since = f"in the last {LOG_EVERY_SECONDS:g} s"
            record.msg = f"{record.msg} (and {held} more like it {since})"
        return True
