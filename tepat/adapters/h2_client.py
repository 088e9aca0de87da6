"""One HTTP/2 connection to a push provider that takes one notification per request (FCM
HTTP v1, APNs), its requests multiplexed as concurrent streams: the ``h2`` library on an
asyncio protocol, without httpx.

Why by hand: httpx + httpcore cost the consumer about 1.3 ms of CPU per notification
(py-spy, ``bench dispatch --provider fcm``: three quarters of its 1.8 ms): their request
and response objects, a pool, a per-request stream lock and a ``send()`` per frame. Here a
request is its headers and body handed to ``h2``, and the frames of every request started
in one turn of the loop leave in one write. The FCM adapter's CPU per notification, 5,000
sends to the in-process sandbox: 1.57 ms over httpx, 0.23 ms here (APNs: 1.40, 0.29); the
whole consumer in ``bench dispatch``: 1.6-3.4 ms before, 0.52-0.62 ms (bench/README.md).
What is left is mostly ``h2``'s own frame and state machine work.

What a failure says (the request's ``TryAgain``): a stream whose whole request (HEADERS
and the DATA ending it) was handed to the socket may have been acted on
(``maybe_sent``); one refused with ``REFUSED_STREAM``, above a GOAWAY's last stream, or
never written, was not. A lost connection, a protocol error or a timeout ends every stream
still open on it that way; the next request opens a new connection. A GOAWAY lets the
streams it covers finish, and new ones go to a new connection. ``HTTPS_PROXY`` /
``HTTP_PROXY`` (and ``NO_PROXY``) are honoured as httpx honours them: through a CONNECT
tunnel.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import socket
import ssl
import urllib.request
from typing import Any, Self, cast
from urllib.parse import SplitResult, unquote, urlsplit

import certifi
import h2.config
import h2.connection
import h2.errors
import h2.events
import h2.exceptions

from tepat.ports.try_again import TryAgain


class H2Response:
    """A stream's answer, read as the adapters read an ``httpx.Response``."""

    __slots__ = ("content", "headers", "status_code")
    reason_phrase = ""  # HTTP/2 sends none

    def __init__(self, status_code: int, headers: dict[str, str], content: bytes) -> None:
        self.status_code = status_code
        self.headers = headers  # names in lower case, as HTTP/2 sends them
        self.content = content

    def json(self) -> Any:
        return json.loads(self.content)

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", "replace")


class StreamFailed(Exception):
    def __init__(self, what: str, maybe_sent: bool) -> None:
        super().__init__(what)
        self.maybe_sent = maybe_sent


class _Stream:
    __slots__ = ("answer", "body", "headers", "status", "timer", "written")

    def __init__(self, answer: asyncio.Future[H2Response]) -> None:
        self.answer = answer
        self.status = 0
        self.headers: dict[str, str] = {}
        self.body = bytearray()
        self.written = False  # its request's last frame went to the socket
        self.timer: asyncio.TimerHandle | None = None


_CONFIG = h2.config.H2Configuration(
    client_side=True,
    header_encoding=None,
    # The adapters' headers are lower-case names of their own: nothing to check or fix;
    # of an answer only ``:status`` and a few headers are read (a bad status: a protocol
    # error). Checking every header was about 0.02 ms a notification.
    validate_outbound_headers=False,
    normalize_outbound_headers=False,
    validate_inbound_headers=False,
)


class _Connection(asyncio.Protocol):
    """The frames of one connection; streams end in their ``answer`` future."""

    def __init__(self, timeout: float) -> None:
        self.h2 = h2.connection.H2Connection(_CONFIG)
        self.timeout = timeout
        self.streams: dict[int, _Stream] = {}
        self.unsent: dict[int, memoryview] = {}  # bodies the flow-control windows hold back
        self.ending: list[_Stream] = []  # their last frame is in h2's buffer, not yet written
        self.usable = True  # False once lost or told to go away: new streams go elsewhere
        self.transport: asyncio.Transport | None = None
        self.room: asyncio.Future[None] | None = None
        self._flush_due = False

    # ---- asyncio's side ----

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's (``tepat serve``) is a transport of this shape but not this class.
        self.transport = cast(asyncio.Transport, transport)
        self.h2.initiate_connection()
        self._flush()

    def data_received(self, data: bytes) -> None:
        try:
            for event in self.h2.receive_data(data):
                self._on(event)
        except (h2.exceptions.ProtocolError, ValueError) as e:
            self._fail_all(f"HTTP/2 protocol error ({e})")
            return
        self._flush()

    def eof_received(self) -> None:
        # The server closed (an idle connection, say): the loop may run a new request
        # before connection_lost, and it must not go here.
        self.usable = False

    def connection_lost(self, exc: Exception | None) -> None:
        self._fail_all(f"connection lost ({exc or 'closed by the server'})")

    # ---- a request ----

    async def request(self, headers: list[tuple[str, str]], body: bytes) -> H2Response:
        # Our open streams are h2's (one answered before its body went is reset, _end):
        # its own count walks every stream.
        while len(self.streams) >= self.h2.remote_settings.max_concurrent_streams:
            self.room = self.room or asyncio.get_running_loop().create_future()
            await self.room
            if not self.usable:
                raise StreamFailed("connection closed before the request", maybe_sent=False)
        stream_id = self.h2.get_next_available_stream_id()
        loop = asyncio.get_running_loop()
        stream = self.streams[stream_id] = _Stream(loop.create_future())
        self.h2.send_headers(stream_id, headers)
        self.unsent[stream_id] = memoryview(body)
        self._send_bodies()
        stream.timer = loop.call_later(self.timeout, self._time_out, stream_id)
        if not self._flush_due:
            # One write for every request started in this turn of the loop.
            self._flush_due = True
            loop.call_soon(self._flush)
        return await stream.answer

    def _send_bodies(self) -> None:
        for stream_id, rest in list(self.unsent.items()):
            size = min(
                len(rest),
                self.h2.local_flow_control_window(stream_id),
                self.h2.max_outbound_frame_size,
            )
            if size or not rest:
                last = size == len(rest)
                self.h2.send_data(stream_id, rest[:size].tobytes(), end_stream=last)
                if last:
                    del self.unsent[stream_id]
                    self.ending.append(self.streams[stream_id])
                else:
                    self.unsent[stream_id] = rest[size:]

    def _flush(self) -> None:
        self._flush_due = False
        data = self.h2.data_to_send()
        if data and self.transport is not None and not self.transport.is_closing():
            self.transport.write(data)
            for stream in self.ending:
                stream.written = True
        self.ending.clear()

    # ---- what the server says ----

    def _on(self, event: h2.events.Event) -> None:
        if isinstance(event, h2.events.ResponseReceived):
            if stream := self.streams.get(event.stream_id or 0):
                for name, value in event.headers or ():
                    if name == b":status":
                        stream.status = int(value)
                    else:
                        stream.headers[bytes(name).decode()] = bytes(value).decode("latin-1")
        elif isinstance(event, h2.events.DataReceived):
            stream_id = event.stream_id or 0
            self.h2.acknowledge_received_data(event.flow_controlled_length or 0, stream_id)
            if stream := self.streams.get(stream_id):
                stream.body += event.data or b""
        elif isinstance(event, h2.events.StreamEnded):
            if stream := self._end(event.stream_id or 0):
                response = H2Response(stream.status, stream.headers, bytes(stream.body))
                stream.answer.set_result(response)
        elif isinstance(event, h2.events.StreamReset):
            refused = event.error_code == h2.errors.ErrorCodes.REFUSED_STREAM
            self._fail(event.stream_id or 0, f"stream reset ({event.error_code!r})", not refused)
        elif isinstance(event, h2.events.WindowUpdated | h2.events.RemoteSettingsChanged):
            self._send_bodies()
            self._wake()
        elif isinstance(event, h2.events.ConnectionTerminated):
            self.usable = False
            last = event.last_stream_id or 0
            what = f"the server went away (GOAWAY {event.error_code!r})"
            for stream_id in [s for s in self.streams if s > last]:
                self._fail(stream_id, what, False)  # never processed: RFC 9113, 6.8
            self._wake()

    def _end(self, stream_id: int) -> _Stream | None:
        stream = self.streams.pop(stream_id, None)
        if self.unsent.pop(stream_id, None) is not None:
            # Ended before its whole body went: close our side too (RFC 9113, 8.1).
            self._reset(stream_id, h2.errors.ErrorCodes.NO_ERROR)
        if stream is not None and stream.timer is not None:
            stream.timer.cancel()
        self._wake()
        if not self.usable and not self.streams and self.transport is not None:
            self.transport.close()  # gone away, its last stream answered
        return stream if stream is not None and not stream.answer.done() else None

    def _fail(self, stream_id: int, what: str, maybe: bool) -> None:
        if stream := self._end(stream_id):
            stream.answer.set_exception(StreamFailed(what, maybe and stream.written))

    def _time_out(self, stream_id: int) -> None:
        if stream_id in self.streams:
            self._reset(stream_id, h2.errors.ErrorCodes.CANCEL)
            self._fail(stream_id, f"timeout (no answer in {self.timeout:g} s)", True)
            self._flush()

    def _reset(self, stream_id: int, code: h2.errors.ErrorCodes) -> None:
        with contextlib.suppress(h2.exceptions.ProtocolError):  # closed already
            self.h2.reset_stream(stream_id, code)

    def _fail_all(self, what: str) -> None:
        self.usable = False
        for stream_id in list(self.streams):
            self._fail(stream_id, what, True)
        self._wake()
        if self.transport is not None:
            self.transport.close()

    def _wake(self) -> None:
        if self.room is not None and not self.room.done():
            self.room.set_result(None)
        self.room = None


class H2Client:
    """Base of an adapter that sends over one HTTP/2 connection to ``base_url``, at most
    ``max_streams`` requests in flight (``http://``: h2c with prior knowledge, as the
    sandboxes serve; ``https://``: TLS with ALPN ``h2``)."""

    def __init__(self, base_url: str, *, max_streams: int, timeout: float, user_agent: str) -> None:
        self.base_url = base_url.rstrip("/")
        self._url = url = urlsplit(self.base_url)
        self._tls = url.scheme == "https"
        self._port = url.port or (443 if self._tls else 80)
        self._user_agent = user_agent
        self.timeout = timeout  # seconds: to connect, and for a stream's answer
        # Wait for a stream here, not against the timeout: a busy moment is no failure.
        self._slots = asyncio.Semaphore(max_streams)
        self._connection: _Connection | None = None
        self._connecting = asyncio.Lock()

    async def _post_h2(
        self, path: str, provider: str, headers: list[tuple[str, str]], body: bytes
    ) -> H2Response | TryAgain:
        """POST ``body``; a failure is TryAgain, maybe sent as the module's docstring says."""
        request = [
            (":method", "POST"),
            (":scheme", self._url.scheme),
            (":authority", self._url.netloc),
            (":path", self._url.path + path),
            ("user-agent", self._user_agent),
            *headers,
        ]
        async with self._slots:
            try:
                connection = await self._connected()
                return await connection.request(request, body)
            except (OSError, TimeoutError, ssl.SSLError) as e:
                failure = StreamFailed(f"cannot connect ({type(e).__name__}: {e})", False)
            except StreamFailed as e:
                failure = e
        when = "after the request was sent" if failure.maybe_sent else "before it was sent"
        return TryAgain(f"{failure} talking to {provider} {when}", maybe_sent=failure.maybe_sent)

    async def _connected(self) -> _Connection:
        if self._connection is not None and self._connection.usable:
            return self._connection
        async with self._connecting:
            if self._connection is None or not self._connection.usable:
                self._connection = await asyncio.wait_for(self._connect(), self.timeout)
        return self._connection

    async def _connect(self) -> _Connection:
        context = None
        if self._tls:
            context = ssl.create_default_context(cafile=certifi.where())
            context.set_alpn_protocols(["h2"])
        loop = asyncio.get_running_loop()
        host = self._url.hostname or ""
        where: dict[str, Any] = {"host": host, "port": self._port}
        if proxy := _proxy_for(self._url.scheme, host):
            # As httpx did (HTTP(S)_PROXY, NO_PROXY): a deployment whose way out is a
            # proxy reaches FCM and APNs through a CONNECT tunnel.
            where = {"sock": await _tunnel(proxy, host, self._port)}
            if context is not None:
                where["server_hostname"] = host
        transport, connection = await loop.create_connection(
            lambda: _Connection(self.timeout), ssl=context, **where
        )
        tls = transport.get_extra_info("ssl_object")
        if tls is not None and tls.selected_alpn_protocol() != "h2":
            transport.close()
            raise ssl.SSLError(f"{self._url.hostname} does not speak HTTP/2 (ALPN)")
        return connection

    async def close(self) -> None:
        if self._connection is not None and self._connection.transport is not None:
            self._connection.transport.close()
        self._connection = None

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


def _proxy_for(scheme: str, host: str) -> SplitResult | None:
    """The proxy the environment names for ``scheme`` (``HTTPS_PROXY``, ``HTTP_PROXY``),
    unless ``NO_PROXY`` exempts ``host``."""
    proxy = urllib.request.getproxies().get(scheme)
    if not proxy or urllib.request.proxy_bypass(host):
        return None
    return urlsplit(proxy if "://" in proxy else f"http://{proxy}")


async def _tunnel(proxy: SplitResult, host: str, port: int) -> socket.socket:
    """A socket connected through ``proxy`` to ``host:port`` (HTTP CONNECT, RFC 9110
    9.3.6), for the HTTP/2 connection to run over."""
    loop = asyncio.get_running_loop()
    infos = await loop.getaddrinfo(proxy.hostname, proxy.port or 80, type=socket.SOCK_STREAM)
    family, kind, proto, _, address = infos[0]
    sock = socket.socket(family, kind, proto)
    sock.setblocking(False)
    try:
        await loop.sock_connect(sock, address)
        auth = ""
        if proxy.username is not None:
            user = f"{unquote(proxy.username)}:{unquote(proxy.password or '')}"
            auth = f"Proxy-Authorization: Basic {base64.b64encode(user.encode()).decode()}\r\n"
        target = f"{host}:{port}"
        await loop.sock_sendall(
            sock, f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n{auth}\r\n".encode()
        )
        head = b""
        while not head.endswith(b"\r\n\r\n"):
            # A byte at a time, once a connection: what follows the answer is the
            # server's (an h2c server speaks first) and must stay in the socket.
            byte = await loop.sock_recv(sock, 1)
            if not byte or len(head) > 16384:
                raise OSError("the proxy closed the tunnel before answering")
            head += byte
        line = head.split(b"\r\n", 1)[0]
        if line.split()[1:2] != [b"200"]:
            raise OSError(f"the proxy refused the tunnel: {line.decode('latin-1')}")
        return sock
    except BaseException:
        sock.close()
        raise
