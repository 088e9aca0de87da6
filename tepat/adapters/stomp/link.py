"""One STOMP connection: stomp.py's receiver thread in, one worker thread out.

stomp.py calls listeners on its receiver thread. The listener only hands the
frame to the event loop (``call_soon_threadsafe``); every frame we *send* (ACK,
NACK, SEND, SUBSCRIBE ...) goes through the connection's own single worker
thread. Sending ACKs from the receiver thread deadlocked client and broker
under a large backlog (``docs/ACTIVEMQ.md``); blocking socket writes on the event loop
would stall everything else. Heartbeats detect a dead peer.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from itertools import count
from typing import Any

import stomp
import structlog
from stomp.exception import StompException

from tepat.adapters.stomp import tls
from tepat.adapters.stomp.frames import text
from tepat.adapters.stomp.url import StompTarget

log = structlog.get_logger("tepat.broker.stomp")


# ConnectionError like the port's BrokerClosed, so callers can treat them alike.
class BrokerUnavailable(ConnectionError):
    """ActiveMQ could not be reached, or the connection broke mid-request."""


class BrokerRefused(BrokerUnavailable):
    """The broker answered but will not take us until a setting changes: its certificate
    fails verification, it wants a client certificate, or it refuses the credentials.

    ``setting`` names what to change: ``"url"`` (host, port, user, password),
    ``"ca_file"`` or ``"cert_file"``.
    """

    def __init__(self, message: str, setting: str) -> None:
        super().__init__(message)
        self.setting = setting


class _DropResentErrors(logging.Filter):
    """stomp.py logs a failed socket write with its traceback and then re-raises it.

    Every write goes through :meth:`Link.request` or :meth:`Link.open`, which turn the
    error into ``BrokerUnavailable`` and say what happened in one line; the extra
    traceback was noise, and a second line where a refused connect must print one
    (a broker that refuses the client certificate closes the socket while stomp.py
    still writes CONNECT).
    """

    def filter(self, record: logging.LogRecord) -> bool:
        return record.getMessage() != "error sending frame"


logging.getLogger("stomp.py").addFilter(_DropResentErrors())

_link_ids = count(1)


class Listener(stomp.ConnectionListener):  # type: ignore[misc]
    """Runs on stomp.py's receiver thread: forwards to the loop, never sends."""

    def __init__(self, link: Link) -> None:
        self._link = link

    def on_message(self, frame: Any) -> None:
        self._link.from_thread(self._link.on_frame, frame)

    def on_receipt(self, frame: Any) -> None:
        self._link.from_thread(self._link.on_receipt, frame.headers.get("receipt-id", ""))

    def on_error(self, frame: Any) -> None:
        self._link.from_thread(self._link.on_error, dict(frame.headers), text(frame.body))

    def on_disconnected(self) -> None:
        self._link.from_thread(self._link.on_disconnected)

    def on_heartbeat_timeout(self) -> None:
        self._link.from_thread(log.warning, "stomp heartbeat timeout", link=self._link.name)


class Link:
    """One STOMP connection: its receiver thread, and one worker thread that writes to it.

    All methods except :meth:`from_thread` run on the event loop.
    """

    def __init__(
        self,
        target: StompTarget,
        name: str,
        *,
        heartbeat_ms: int,
        timeout: float,
        on_frame: Callable[[Link, Any], None] | None = None,
        on_lost: Callable[[Link], None] | None = None,
    ) -> None:
        self.id = next(_link_ids)
        self.name = f"{name}#{self.id}"
        self._target = target
        self._heartbeat_ms = heartbeat_ms
        self.timeout = timeout
        self._frame_handler = on_frame
        self._lost_handler = on_lost
        self._loop = asyncio.get_running_loop()
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"stomp-{name}")
        self._receipts: dict[str, asyncio.Future[None]] = {}
        self.conn: Any = None
        self.connected = False
        self._closing = False

    # -- called on the receiver thread ----------------------------------------

    def from_thread(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
        # a closed loop raises RuntimeError: nobody is listening any more
        with contextlib.suppress(RuntimeError):
            self._loop.call_soon_threadsafe(partial(fn, *args, **kwargs))

    # -- loop side ------------------------------------------------------------

    async def _run(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        return await self._loop.run_in_executor(self._executor, partial(fn, *args, **kwargs))

    async def open(self) -> None:
        t = self._target
        conn = stomp.Connection12(
            [(t.host, t.port)],
            heartbeats=(self._heartbeat_ms, self._heartbeat_ms),
            # ActiveMQ skips a heart-beat when it wrote anything during the last
            # interval, so its silences last up to two intervals (measured: the
            # first beat 20 s after CONNECTED at 10 s): stomp.py's default
            # tolerance of 1.5 intervals dropped idle connections
            heart_beat_receive_scale=2.5,
            auto_decode=False,
            reconnect_attempts_max=1,
            timeout=self.timeout,
            prefer_localhost=False,
            try_loopback_connect=False,
        )
        if t.tls is not None:
            tls.set_ssl(conn, t.host, t.port, t.tls)
        conn.set_listener("tepat", Listener(self))
        self.conn = conn
        try:
            await asyncio.wait_for(
                self._run(
                    conn.connect,
                    t.user,
                    t.password,
                    wait=True,
                    headers={"client-id": f"tepat-{self.name}-{uuid.uuid4().hex[:8]}"},
                ),
                self.timeout,
            )
        except (StompException, OSError, TimeoutError) as e:
            # not on the worker: after a timeout it may still wait in connect(),
            # and only closing the transport ends that wait
            threading.Thread(target=quiet_disconnect, args=(conn,), daemon=True).start()
            self._executor.shutdown(wait=False)
            raise await self._why_not(e) from e
        self.connected = True

    async def _why_not(self, e: BaseException) -> BrokerUnavailable:
        """What stomp.py's bare ``ConnectFailedException`` hides (it only logs the reason)."""
        t = self._target
        where = f"cannot connect to ActiveMQ at {t.host}:{t.port}"
        timed_out = isinstance(e, TimeoutError)
        try:
            found = await asyncio.wait_for(
                asyncio.to_thread(tls.diagnose, t, self.timeout, timed_out=timed_out),
                self.timeout + 1,
            )
        except TimeoutError:
            found = None
        if found is None:  # it works now, or nothing more to learn
            why = f"no answer within {self.timeout:g} s" if timed_out else f"{type(e).__name__} {e}"
            return BrokerUnavailable(f"{where}: {why}".rstrip())
        if found.culprit is not None:
            return BrokerRefused(f"{where}: {found.reason}", found.culprit)
        return BrokerUnavailable(f"{where}: {found.reason}")

    async def request(self, method: str, *args: Any, **kwargs: Any) -> None:
        """Send one frame from the worker thread and wait for the broker's RECEIPT."""
        receipt = uuid.uuid4().hex
        fut: asyncio.Future[None] = self._loop.create_future()
        self._receipts[receipt] = fut
        try:
            await self.send_frame(method, *args, receipt=receipt, **kwargs)
            try:
                await asyncio.wait_for(fut, self.timeout)
            except TimeoutError:
                raise BrokerUnavailable(f"no receipt for {method} on {self.name}") from None
        finally:
            self._receipts.pop(receipt, None)

    async def send_frame(self, method: str, *args: Any, **kwargs: Any) -> None:
        """Send one frame from the worker thread (without waiting for a receipt)."""
        if not self.connected:
            raise BrokerUnavailable(f"stomp connection {self.name} is down")
        try:
            await self._run(getattr(self.conn, method), *args, **kwargs)
        except (StompException, OSError) as e:
            raise BrokerUnavailable(f"{method} failed on {self.name}: {e}") from e

    async def close(self) -> None:
        """Disconnect (the broker then redelivers this connection's unacked messages)."""
        if self._closing:
            return
        self._closing = True
        was_connected, self.connected = self.connected, False
        if self.conn is not None and was_connected:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(
                    self._run(self.conn.disconnect, receipt=uuid.uuid4().hex), self.timeout
                )
        if self.conn is not None:
            # the transport's threads must stop even if DISCONNECT got no answer
            self._executor.submit(quiet_disconnect, self.conn)
        self._executor.shutdown(wait=False)
        self._fail_receipts("stomp connection closed")

    def on_frame(self, frame: Any) -> None:
        if self._frame_handler is not None and not self._closing:
            self._frame_handler(self, frame)

    def on_receipt(self, receipt: str) -> None:
        fut = self._receipts.get(receipt)
        if fut is not None and not fut.done():
            fut.set_result(None)

    def on_error(self, headers: dict[str, str], body: str) -> None:
        message = headers.get("message", "") + (f": {body.strip()}" if body.strip() else "")
        receipt = headers.get("receipt-id")
        fut = self._receipts.get(receipt) if receipt else None
        if fut is not None and not fut.done():
            fut.set_exception(BrokerUnavailable(f"ActiveMQ error: {message}"))
        else:
            log.warning("stomp error frame", link=self.name, error=message)

    def on_disconnected(self) -> None:
        if self._closing or not self.connected:  # ours, or a connect that failed
            return
        self.connected = False
        self._fail_receipts("stomp connection lost")
        log.warning("stomp connection lost", link=self.name)
        if self._lost_handler is not None:
            self._lost_handler(self)

    def _fail_receipts(self, why: str) -> None:
        for fut in self._receipts.values():
            if not fut.done():
                fut.set_exception(BrokerUnavailable(why))


def quiet_disconnect(conn: Any) -> None:
    with contextlib.suppress(Exception):
        conn.transport.disconnect_socket()
