"""The FCM and APNs sandboxes' server: HTTP/2 without TLS (prior knowledge) framed by
hand, and HTTP/1.1 on the same port through uvicorn's protocol.

Why by hand: served by hypercorn and Starlette, a sandbox cost 0.7-1.0 ms of CPU per
notification (``bench dispatch --provider fcm|apns``), as much as the consumer it stands
beside; ``h2``'s state machine alone costs about 0.25 ms a request, and ``hpack``'s
decoder most of 0.1 ms for an APNs request (a new path and ``apns-id`` each time, Huffman
coded). Here a send request is two frames cut from the read buffer, a header block
decoded once (a block that leaves the table as it was is remembered: FCM's are all
alike) and the sandbox's own synchronous handler (:class:`HotSendProvider`), which reads
a :class:`HotRequest` and gives an :class:`Answer`: no Starlette request, response or
route match, whose making cost more than the handler itself. The answers of one read
leave in one write, and the requests completed in one read share one arrival stamp, the
sandbox's clock when those bytes came in (:attr:`HotRequest.at`).

Only the send route is served that way, and only while no answer is scripted to be lost:
every other HTTP/2 request, and every fault after accepting (a stall waits for the client
to hang up, a drop resets the stream), runs the sandbox's Starlette app through a small
ASGI bridge; HTTP/1.1 (Google's token endpoint, the ``/_sandbox/`` controls) is handed
to uvicorn's own protocol. The HTTP/2 side keeps to what a client needs: SETTINGS and
their ACK, PING, GOAWAY, RST_STREAM, CONTINUATION, flow control both ways (this server
opens large windows and tops them up, so a client never stalls on them), and no server
push or priorities.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import socket
import struct
from abc import abstractmethod
from collections import deque
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import datetime
from typing import Any, ClassVar, NamedTuple, cast
from urllib.parse import unquote

import uvicorn
from hpack.exceptions import HPACKDecodingError
from hpack.huffman_table import decode_huffman
from hpack.table import HeaderTable
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from uvicorn.protocols.http.h11_impl import H11Protocol
from uvicorn.server import ServerState

from tepat.adapters.h2_client import _FRAME, _PREFACE, _SETTING, _frame, _integer, _prefixed
from tepat.clock import Clock, SystemClock
from tepat.sandbox.provider import FakeProvider, State

logger = logging.getLogger(__name__)
# frame types (PRIORITY, 2, is ignored)
DATA, HEADERS, RST_STREAM, SETTINGS, PUSH_PROMISE, PING, GOAWAY = 0, 1, 3, 4, 5, 6, 7
WINDOW_UPDATE, CONTINUATION = 8, 9
END_STREAM, ACK, END_HEADERS, PADDED, PRIORITY_FLAG = 0x1, 0x1, 0x4, 0x8, 0x20
NO_ERROR, PROTOCOL_ERROR, INTERNAL_ERROR, FLOW_CONTROL_ERROR = 0, 1, 2, 3
FRAME_SIZE_ERROR, REFUSED_STREAM, COMPRESSION_ERROR = 6, 7, 9
MAX_STREAMS = 100  # as hypercorn allowed
MAX_FRAME = 2**14  # the size every peer must take, and all this server takes
HEADER_TABLE_SIZE = 4096
STREAM_WINDOW = 2**20  # bytes a client may send on one stream before it is topped up
CONNECTION_WINDOW = 2**24
_OUR_SETTINGS = b"".join(
    _SETTING.pack(k, v) for k, v in ((0x3, MAX_STREAMS), (0x4, STREAM_WINDOW), (0x2, 0))
)
_FORBIDDEN = {b"connection", b"keep-alive", b"transfer-encoding", b"upgrade"}


class H2Error(Exception):
    """The connection is broken (RFC 9113 connection error): GOAWAY with ``code``."""

    def __init__(self, code: int, why: str) -> None:
        super().__init__(why)
        self.code = code


# ---- HPACK ----

_STATIC: tuple[tuple[bytes, bytes], ...] = HeaderTable.STATIC_TABLE
_STATIC_SIZE = len(_STATIC)
# Huffman strings decoded lately: a client sends its credentials (an APNs provider token,
# an OAuth token) never indexed, so as one and the same literal in every request.
_decoded: dict[bytes, bytes] = {}


def _string(block: bytes, i: int) -> tuple[bytes, int]:
    huffman = block[i] & 0x80
    length, i = _prefixed(block, i, 7)
    end = i + length
    if end > len(block):
        raise H2Error(COMPRESSION_ERROR, "a header string runs past its block")
    raw = block[i:end]
    if not huffman:
        return raw, end
    if (known := _decoded.get(raw)) is None:
        if len(_decoded) >= 512:
            _decoded.clear()
        try:
            known = _decoded[raw] = decode_huffman(raw)
        except HPACKDecodingError as e:
            raise H2Error(COMPRESSION_ERROR, str(e)) from e
    return known, end


class HeaderDecoder:
    """HPACK's decoder (RFC 7541), with a memory of the blocks that left its table as
    it was: decoding one again gives the same headers."""

    def __init__(self) -> None:
        self._table: deque[tuple[bytes, bytes]] = deque()  # newest first
        self._size = 0
        self._limit = HEADER_TABLE_SIZE
        self._known: dict[bytes, list[tuple[bytes, bytes]]] = {}

    def decode(self, block: bytes) -> list[tuple[bytes, bytes]]:
        """The block's headers (a list the caller must not change)."""
        if (known := self._known.get(block)) is not None:
            return known
        try:
            headers, changed = self._decode(block)
        except IndexError as e:
            raise H2Error(COMPRESSION_ERROR, "a header block ends early") from e
        if changed:
            self._known.clear()
        elif len(self._known) < 256:
            self._known[block] = headers
        return headers

    def _decode(self, block: bytes) -> tuple[list[tuple[bytes, bytes]], bool]:
        headers: list[tuple[bytes, bytes]] = []
        changed, i, end, table = False, 0, len(block), self._table
        while i < end:
            byte = block[i]
            if byte & 0x80:  # indexed, most of them in one byte (read here, at a lower cost)
                if (index := byte & 0x7F) < 0x7F:
                    i += 1
                else:
                    index, i = _prefixed(block, i, 7)
                headers.append(self._entry(index))
                continue
            if byte & 0xE0 == 0x20:  # a dynamic table size update
                self._limit, i = _prefixed(block, i, 5)
                if self._limit > HEADER_TABLE_SIZE:
                    raise H2Error(COMPRESSION_ERROR, "table size over the one allowed")
                self._evict()
                changed = True
                continue
            indexing = byte & 0xC0 == 0x40
            index, i = _prefixed(block, i, 6 if indexing else 4)
            if index:
                name = self._entry(index)[0]
            else:
                name, i = _string(block, i)
            value, i = _string(block, i)
            headers.append((name, value))
            if indexing:
                table.appendleft((name, value))
                self._size += len(name) + len(value) + 32
                self._evict()
                changed = True
        return headers, changed

    def _entry(self, index: int) -> tuple[bytes, bytes]:
        if 0 < index <= _STATIC_SIZE:
            return _STATIC[index - 1]
        if 0 < index - _STATIC_SIZE <= len(self._table):
            return self._table[index - _STATIC_SIZE - 1]
        raise H2Error(COMPRESSION_ERROR, f"no header at index {index}")

    def _evict(self) -> None:
        while self._size > self._limit:
            name, value = self._table.pop()
            self._size -= len(name) + len(value) + 32


_STATUS = {200: b"\x88", 204: b"\x89", 206: b"\x8a", 304: b"\x8b", 400: b"\x8c", 404: b"\x8d"}
# A header name's literal (never indexed, the name a literal too), b"" for the names HTTP/2
# forbids: an answer's names are few and come back with every answer.
_name_literals: dict[bytes, bytes] = {}


def _name_literal(name: bytes) -> bytes:
    if (literal := _name_literals.get(name)) is None:
        lower = name.lower()
        literal = b"" if lower in _FORBIDDEN else b"\x00" + _integer(len(lower), 7, 0) + lower
        if len(_name_literals) < 256:
            _name_literals[name] = literal
    return literal


def encode_headers(status: int, headers: Sequence[tuple[bytes, bytes]]) -> bytes:
    """An answer's header block: literals never added to the client's table, so the
    block means the same whatever came before it."""
    parts = [_STATUS.get(status) or b"\x08\x03" + b"%d" % status]
    for name, value in headers:
        if literal := _name_literal(name):
            size = len(value)
            parts += (literal, bytes((size,)) if size < 0x7F else _integer(size, 7, 0), value)
    return b"".join(parts)


# ---- what the server serves ----


class Answer(NamedTuple):
    """An answer as this server writes it (what a Starlette response's ``status_code``,
    ``raw_headers`` and ``body`` are), without the cost of making a response object."""

    status: int
    headers: Sequence[tuple[bytes, bytes]]  # lower-case names
    body: bytes

    @classmethod
    def of(cls, response: Response) -> Answer:
        return cls(response.status_code, response.raw_headers, bytes(response.body))

    def response(self) -> Response:
        """The same answer for the app (HTTP/1.1, or an answer a fault is to lose)."""
        response = Response(self.body, self.status)
        response.raw_headers = list(self.headers)
        return response


class HotRequest:
    """What a hot route reads of a request: its path's parameters, its headers, the
    client's address, and ``at``, the sandbox's clock when the request arrived: at the
    read that completed it, over HTTP/2; when the app took it otherwise (HTTP/1.1, or an
    answer a scripted fault is to lose)."""

    __slots__ = ("_by_name", "at", "client", "path_params", "raw_headers")

    def __init__(
        self,
        path_params: dict[str, Any],
        raw_headers: Sequence[tuple[bytes, bytes]],
        client: tuple[str, int] | None,
        at: datetime,
    ) -> None:
        self.path_params = path_params
        self.raw_headers = raw_headers  # as received: lower-case names (HTTP/2, uvicorn)
        self.client = client
        self.at = at
        self._by_name: dict[bytes, bytes] | None = None

    @classmethod
    def of(cls, request: Request, at: datetime) -> HotRequest:
        client = request.scope.get("client")
        address = None if client is None else (client[0], client[1])
        return cls(request.path_params, request.scope["headers"], address, at)

    def header(self, name: bytes) -> str | None:
        """The first value of header ``name`` (lower case), as Starlette's ``headers``."""
        if (by_name := self._by_name) is None:
            by_name = self._by_name = dict(reversed(self.raw_headers))  # the first wins
        value = by_name.get(name)
        return None if value is None else value.decode("latin-1")


def json_body(raw: bytes) -> Any:
    """``json.loads(raw)``: for a UTF-8 object (every client's), without its guess at
    the encoding."""
    if raw[:1] == b"{" and raw[1:2] != b"\x00":
        return json.loads(raw.decode("utf-8", "surrogatepass"))
    return json.loads(raw)


class HotRoute(NamedTuple):
    """A route served without the app: ``take`` answers a request whose body is read,
    on the server's loop, or returns None to leave it to the app."""

    route: Route
    take: Callable[[HotRequest, bytes], Answer | None]

    def path_params(self, found: re.Match[str]) -> dict[str, Any]:
        convertors = self.route.param_convertors
        return {key: convertors[key].convert(value) for key, value in found.groupdict().items()}


class HotSendProvider(FakeProvider[State]):
    """A sandbox whose send route (:attr:`_send_path`, POST) this server answers
    without the app, through :meth:`_take_send`; the app serves the same route the same
    way (HTTP/1.1, and when an answer is to be lost).

    Its received log's ``at`` is :attr:`HotRequest.at`: over HTTP/2, when the request's
    last bytes were read off the socket (one stamp for every request completed in one
    read), not when the sandbox came to handle it behind the others of that read.
    """

    http2 = True
    _send_path: ClassVar[str]

    def __init__(
        self,
        new_state: Callable[[], State],
        scripts: Mapping[str, Any] | None,
        clock: Clock | None,
        rate_limit: float | None,
        stall_limit_seconds: float,
        routes: Sequence[Route] = (),
    ) -> None:
        send = Route(self._send_path, self._send, methods=["POST"])
        super().__init__(
            new_state, scripts, clock, rate_limit, stall_limit_seconds, [*routes, send]
        )
        self.app.state.hot_routes = (HotRoute(send, self._take_hot),)
        self.app.state.clock = self.clock  # the server stamps each read with it
        self._stamp: tuple[datetime | None, str] = (None, "")

    @abstractmethod
    def _take_send(self, request: HotRequest, body: bytes) -> tuple[Answer, list[dict[str, Any]]]:
        """One send request: its answer, and what it accepted (empty when refused)."""

    async def _send(self, request: Request) -> Response:
        body = await request.body()
        answer, accepted = self._take_send(HotRequest.of(request, self.clock.now()), body)
        response = answer.response()
        return await self.lose_or_answer(response, request, accepted) if accepted else response

    def _take_hot(self, request: HotRequest, body: bytes) -> Answer | None:
        with self._lock:
            if self._state.faults.lost_answers:
                return None  # the app's path plays the fault (a stall, a drop, a 5xx)
        return self._take_send(request, body)[0]

    def _admit_send(self, request: HotRequest) -> Answer | None:
        """The kit's gate (scripted refusals, then the credentials) for a send request."""
        refused = self._gate(request)
        return None if refused is None else Answer.of(refused)

    def _arrival(self, at: datetime) -> str:
        """``at`` as the received log writes it, formatted once for all the requests of
        one read (they share one stamp)."""
        stamped, text = self._stamp
        if stamped is not at:
            text = at.isoformat()
            self._stamp = (at, text)
        return text


# ---- one connection ----


class _Stream:
    __slots__ = ("body", "ends", "gone", "headers", "id", "pending", "send_window")

    def __init__(self, stream_id: int, headers: list[tuple[bytes, bytes]], window: int) -> None:
        self.id = stream_id
        self.headers = headers
        self.body = bytearray()
        self.send_window = window
        self.pending = b""  # answer bytes waiting for the client's window
        self.ends = True  # whether the last of them ends the stream
        self.gone: asyncio.Future[None] | None = None  # for the app: set when reset


class _Connection(asyncio.Protocol):
    """One client's connection: HTTP/2 if it opens with the preface, else HTTP/1.1
    handed to uvicorn's protocol."""

    def __init__(self, server: H2cServer) -> None:
        self._server = server
        self._transport: asyncio.Transport | None = None
        self._buffer = bytearray()
        self._h2 = False
        self._out: list[bytes] = []
        self._streams: dict[int, _Stream] = {}
        self._blocked: dict[int, _Stream] = {}  # answers waiting for a WINDOW_UPDATE
        self._last_stream = 0
        self._decoder = HeaderDecoder()
        self._continued: tuple[int, int, bytearray] | None = None  # stream, flags, block
        self._peer_window = 65535  # the client's SETTINGS_INITIAL_WINDOW_SIZE
        self._peer_frame = MAX_FRAME
        self._send_window = 65535  # the connection's, towards the client
        self._unacked = 0  # bytes received on the connection since its last top-up
        self._closing = False
        self._draining = False  # the client said GOAWAY
        self._client: tuple[str, int] | None = None
        self._local: tuple[str, int] | None = None
        self._read_at = self._server.clock.now()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)  # uvloop's too
        self._client = transport.get_extra_info("peername")[:2]
        self._local = transport.get_extra_info("sockname")[:2]
        self._server.connections.add(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self._server.connections.discard(self)
        for stream in self._streams.values():
            self._hang_up(stream)
        self._streams.clear()
        self._blocked.clear()

    def data_received(self, data: bytes) -> None:
        # When the requests completed in this read arrived, whatever the work on those
        # ahead of them (see HotRequest.at).
        self._read_at = self._server.clock.now()
        self._buffer += data
        if not self._h2:
            if len(self._buffer) < len(_PREFACE) and _PREFACE.startswith(self._buffer):
                return
            if not self._buffer.startswith(_PREFACE):
                self._hand_to_uvicorn()
                return
            self._h2 = True
            del self._buffer[: len(_PREFACE)]
            self._out += (
                _frame(SETTINGS, 0, 0, _OUR_SETTINGS),
                _frame(WINDOW_UPDATE, 0, 0, (CONNECTION_WINDOW - 65535).to_bytes(4)),
            )
        try:
            self._read_frames()
        except H2Error as e:
            self.go_away(e.code)
        self._flush()

    def _hand_to_uvicorn(self) -> None:
        assert self._transport is not None
        self._server.connections.discard(self)
        http1 = H11Protocol(self._server.uvicorn_config, self._server.uvicorn_state, {})
        self._transport.set_protocol(http1)
        http1.connection_made(self._transport)
        http1.data_received(bytes(self._buffer))

    def go_away(self, code: int = NO_ERROR) -> None:
        if self._transport is None or self._closing:
            return
        self._closing = True
        self._out.append(_frame(GOAWAY, 0, 0, struct.pack(">LL", self._last_stream, code)))
        self._flush()
        self._transport.close()

    def _flush(self) -> None:
        if self._out and self._transport is not None and not self._transport.is_closing():
            self._transport.write(b"".join(self._out))
        self._out.clear()

    # ---- frames in ----

    def _read_frames(self) -> None:
        buffer = self._buffer
        pos, size = 0, len(buffer)
        while size - pos >= 9 and not self._closing:
            high, low, ftype, flags, stream_id = _FRAME.unpack_from(buffer, pos)
            length = high << 8 | low
            if length > MAX_FRAME:
                raise H2Error(FRAME_SIZE_ERROR, f"a frame of {length} bytes")
            end = pos + 9 + length
            if end > size:
                break
            payload = bytes(buffer[pos + 9 : end])
            pos = end
            stream_id &= 0x7FFFFFFF
            if self._continued is not None and (
                ftype != CONTINUATION or stream_id != self._continued[0]
            ):
                raise H2Error(PROTOCOL_ERROR, "a header block broken off")
            if ftype == DATA:
                self._data(flags, stream_id, payload, length)
            elif ftype == HEADERS:
                self._headers(flags, stream_id, payload)
            elif ftype == CONTINUATION:
                self._continuation(flags, stream_id, payload)
            elif ftype == WINDOW_UPDATE:
                self._window_update(stream_id, payload)
            elif ftype == SETTINGS:
                self._settings(flags, payload)
            elif ftype == PING:
                if not flags & ACK:
                    self._out.append(_frame(PING, ACK, 0, payload))
            elif ftype == RST_STREAM:
                if (stream := self._streams.pop(stream_id, None)) is not None:
                    self._blocked.pop(stream_id, None)
                    self._hang_up(stream)
            elif ftype == GOAWAY:
                self._draining = True  # closed once the last stream open is answered
                self._closed(None)
            elif ftype == PUSH_PROMISE:
                raise H2Error(PROTOCOL_ERROR, "a client may not push")
            # PRIORITY, and frame types this server does not know: ignored, as RFC 9113 asks
        del buffer[:pos]
        if self._unacked >= CONNECTION_WINDOW // 2:
            self._out.append(_frame(WINDOW_UPDATE, 0, 0, self._unacked.to_bytes(4)))
            self._unacked = 0

    def _data(self, flags: int, stream_id: int, payload: bytes, length: int) -> None:
        if stream_id == 0:
            raise H2Error(PROTOCOL_ERROR, "DATA on stream 0")
        self._unacked += length
        if flags & PADDED:
            payload = payload[1 : len(payload) - payload[0]]
        stream = self._streams.get(stream_id)
        if stream is None:  # one this server reset or answered already, or never opened
            if stream_id > self._last_stream:
                raise H2Error(PROTOCOL_ERROR, "DATA on an idle stream")
            return
        stream.body += payload
        if flags & END_STREAM:
            self._dispatch(stream)
        elif len(stream.body) >= STREAM_WINDOW // 2:
            # a body this large is rare: top its window up by what it has sent so far
            self._out.append(_frame(WINDOW_UPDATE, 0, stream_id, length.to_bytes(4)))

    def _headers(self, flags: int, stream_id: int, payload: bytes) -> None:
        if stream_id == 0 or not stream_id & 1:
            raise H2Error(PROTOCOL_ERROR, f"HEADERS on stream {stream_id}")
        start, end = 0, len(payload)
        if flags & PADDED:
            start, end = 1, end - payload[0]
        if flags & PRIORITY_FLAG:
            start += 5
        block = payload[start:end]
        if flags & END_HEADERS:
            self._header_block(flags, stream_id, block)
        else:
            self._continued = (stream_id, flags, bytearray(block))

    def _continuation(self, flags: int, stream_id: int, payload: bytes) -> None:
        if self._continued is None:
            raise H2Error(PROTOCOL_ERROR, "CONTINUATION without HEADERS")
        block = self._continued[2]
        block += payload
        if len(block) > 2**16:
            raise H2Error(PROTOCOL_ERROR, "a header block over 64 KiB")
        if flags & END_HEADERS:
            first = self._continued[1]
            self._continued = None
            self._header_block(first, stream_id, bytes(block))

    def _header_block(self, flags: int, stream_id: int, block: bytes) -> None:
        headers = self._decoder.decode(block)  # always: the table must follow the client's
        if stream_id <= self._last_stream:
            if (stream := self._streams.get(stream_id)) is not None and flags & END_STREAM:
                self._dispatch(stream)  # trailers end it
            return
        self._last_stream = stream_id
        if len(self._streams) >= MAX_STREAMS:
            self._out.append(_frame(RST_STREAM, 0, stream_id, REFUSED_STREAM.to_bytes(4)))
            return
        stream = self._streams[stream_id] = _Stream(stream_id, headers, self._peer_window)
        if flags & END_STREAM:
            self._dispatch(stream)

    def _window_update(self, stream_id: int, payload: bytes) -> None:
        increment = int.from_bytes(payload) & 0x7FFFFFFF
        if stream_id == 0:
            self._send_window += increment
        elif (stream := self._streams.get(stream_id)) is not None:
            stream.send_window += increment
        if self._blocked:
            for stream in list(self._blocked.values()):
                self._send_data(stream, stream.pending, stream.ends)

    def _settings(self, flags: int, payload: bytes) -> None:
        if flags & ACK:
            return
        if len(payload) % 6:
            raise H2Error(FRAME_SIZE_ERROR, "SETTINGS of a wrong length")
        for offset in range(0, len(payload), 6):
            key, value = _SETTING.unpack_from(payload, offset)
            if key == 0x4:
                if value > 0x7FFFFFFF:
                    raise H2Error(FLOW_CONTROL_ERROR, "an initial window over 2^31-1")
                for stream in self._streams.values():
                    stream.send_window += value - self._peer_window
                self._peer_window = value
            elif key == 0x5:
                self._peer_frame = value
        self._out.append(_frame(SETTINGS, ACK, 0))
        for stream in list(self._blocked.values()):
            self._send_data(stream, stream.pending, stream.ends)

    # ---- requests ----

    def _dispatch(self, stream: _Stream) -> None:
        method = raw_path = b""
        for name, value in stream.headers:
            if name == b":method":
                method = value
            elif name == b":path":
                raw_path = value
            if method and raw_path:
                break
        if not method or not raw_path:
            self._respond(stream, 400, [], b"")
            return
        path_bytes, _, query = raw_path.partition(b"?")
        path = unquote(path_bytes.decode("latin-1"))
        if (answer := self._hot_answer(stream, method.decode("latin-1"), path)) is not None:
            self._respond(stream, answer.status, answer.headers, answer.body)
            return
        scope = self._scope(stream, method, path, path_bytes, query)
        loop = asyncio.get_running_loop()
        stream.gone = loop.create_future()  # now: a reset may come in this same read
        task = loop.create_task(self._run_app(stream, stream.gone, scope))
        self._server.tasks.add(task)
        task.add_done_callback(self._server.tasks.discard)

    def _hot_answer(self, stream: _Stream, method: str, path: str) -> Answer | None:
        """The answer of the first hot route that takes this method and path, or None:
        the app answers (a 405 for a method no route takes, as Starlette routes)."""
        for hot in self._server.hot_routes:
            if (found := hot.route.path_regex.match(path)) is None:
                continue
            if hot.route.methods and method not in hot.route.methods:
                continue
            request = HotRequest(
                hot.path_params(found), stream.headers, self._client, self._read_at
            )
            try:
                return hot.take(request, bytes(stream.body))
            except Exception:  # as Starlette answers a route that raises
                logger.exception("the sandbox failed on %s", path)
                return Answer.of(Response(status_code=500))
        return None

    def _scope(
        self, stream: _Stream, method: bytes, path: str, raw_path: bytes, query: bytes
    ) -> dict[str, Any]:
        headers: list[tuple[bytes, bytes]] = []
        for name, value in stream.headers:
            if not name.startswith(b":"):
                headers.append((name, value))
            elif name == b":authority":
                headers.append((b"host", value))
        return {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "2",
            "method": method.decode("latin-1"),
            "scheme": "http",
            "path": path,
            "raw_path": raw_path,
            "query_string": query,
            "root_path": "",
            "headers": headers,
            "client": self._client,
            "server": self._local,
            "extensions": {},
        }

    def _respond(
        self, stream: _Stream, status: int, headers: Sequence[tuple[bytes, bytes]], body: bytes
    ) -> None:
        block = encode_headers(status, headers)
        flags = END_HEADERS if body else END_HEADERS | END_STREAM
        if len(block) <= self._peer_frame:
            self._out.append(_frame(HEADERS, flags, stream.id, block))
        else:
            size = self._peer_frame
            pieces = [block[i : i + size] for i in range(0, len(block), size)]
            self._out.append(_frame(HEADERS, flags & END_STREAM, stream.id, pieces[0]))
            for piece in pieces[1:-1]:
                self._out.append(_frame(CONTINUATION, 0, stream.id, piece))
            self._out.append(_frame(CONTINUATION, END_HEADERS, stream.id, pieces[-1]))
        if body:
            self._send_data(stream, body)
        else:
            self._closed(stream)

    def _send_data(self, stream: _Stream, data: bytes, end: bool = True) -> None:
        """As much of ``data`` as the windows let go now; the rest when they open."""
        while data:
            size = min(len(data), self._peer_frame, self._send_window, stream.send_window)
            if size <= 0:
                break
            chunk, data = data[:size], data[size:]
            self._send_window -= size
            stream.send_window -= size
            flags = END_STREAM if end and not data else 0
            self._out.append(_frame(DATA, flags, stream.id, chunk))
        stream.pending, stream.ends = data, end
        if data:
            self._blocked[stream.id] = stream
        else:
            self._blocked.pop(stream.id, None)
            if end:
                self._closed(stream)

    def _closed(self, stream: _Stream | None) -> None:
        if stream is not None:
            self._streams.pop(stream.id, None)
        if self._draining and not self._streams and self._transport is not None:
            self._flush()
            self._transport.close()

    def _hang_up(self, stream: _Stream) -> None:
        if stream.gone is not None and not stream.gone.done():
            stream.gone.set_result(None)

    async def _run_app(
        self, stream: _Stream, gone: asyncio.Future[None], scope: dict[str, Any]
    ) -> None:
        """The app answers (the ASGI bridge): a response it leaves unfinished resets the
        stream, as a connection dropped mid-answer does over HTTP/1.1."""
        body: bytes | None = bytes(stream.body)
        started: dict[str, Any] | None = None
        finished = False

        async def receive() -> dict[str, Any]:
            nonlocal body
            if body is not None:
                message = {"type": "http.request", "body": body, "more_body": False}
                body = None
                return message
            await asyncio.shield(gone)
            return {"type": "http.disconnect"}

        async def send(message: dict[str, Any]) -> None:
            nonlocal started, finished
            if gone.done() or finished:
                return
            if message["type"] == "http.response.start":
                started = message
                return
            if message["type"] != "http.response.body" or started is None:
                return
            chunk, more = message.get("body", b""), message.get("more_body", False)
            if started.get("sent") is None:
                started["sent"] = True
                headers = started.get("headers", [])
                if more:
                    block = encode_headers(started["status"], headers)
                    self._out.append(_frame(HEADERS, END_HEADERS, stream.id, block))
                else:
                    finished = True
                    self._respond(stream, started["status"], headers, chunk)
                    self._flush()
                    return
            finished = not more
            self._send_data(stream, stream.pending + chunk, end=finished)
            self._flush()

        try:
            await self._server.app(scope, receive, send)
        finally:
            if not finished and not gone.done() and stream.id in self._streams:
                if started is None:
                    self._respond(stream, 500, [], b"")
                else:  # a response it left unfinished
                    self._streams.pop(stream.id, None)
                    self._blocked.pop(stream.id, None)
                    self._out.append(_frame(RST_STREAM, 0, stream.id, INTERNAL_ERROR.to_bytes(4)))
                self._flush()


class H2cServer:
    """The server over one listening socket (see the module's docstring)."""

    def __init__(self, app: Any) -> None:
        self.app = app
        state = getattr(app, "state", None)
        self.hot_routes: Sequence[HotRoute] = getattr(state, "hot_routes", ())
        self.clock: Clock = getattr(state, "clock", None) or SystemClock()
        self.uvicorn_config = uvicorn.Config(
            app, log_level="warning", lifespan="off", access_log=False, log_config=None
        )
        self.uvicorn_config.load()
        self.uvicorn_state = ServerState()
        self.connections: set[_Connection] = set()
        self.tasks: set[asyncio.Task[None]] = set()

    async def serve(self, sock: socket.socket, until: Callable[[], Awaitable[Any]]) -> None:
        loop = asyncio.get_running_loop()
        server = await loop.create_server(lambda: _Connection(self), sock=sock)
        try:
            await until()
        finally:
            server.close()
            for connection in list(self.connections):
                connection.go_away()
            for http1 in list(self.uvicorn_state.connections):
                http1.shutdown()
            for task in list(self.tasks):
                task.cancel()
            if self.tasks:
                await asyncio.wait(self.tasks, timeout=1.0)
