"""One HTTP/2 connection to a push provider that takes one notification per request (FCM
HTTP v1, APNs), its requests multiplexed as concurrent streams: HTTP/2 framing written
here on an asyncio protocol, ``hpack``'s decoder for the answers' headers.

Why by hand: httpx + httpcore cost the consumer about 1.3 ms of CPU per notification
(their request and response objects, a pool, a per-request stream lock, a ``send()`` per
frame); the ``h2`` library after them still cost 0.23-0.29 ms (py-spy: its
``send_headers`` and HPACK encoder, its frame parsing and state machine on receipt, about
a fifth of the consumer's samples). A client that only ever POSTs a small body and
reads a small answer needs little of that: here a request's header block is a cached
byte string (the headers that stay the same from one request to the next are entered
once into HPACK's dynamic table, then named by index; the ones that vary are literals,
never indexed), its frames are packed with ``struct``, and the frames of every request
started in one turn of the loop leave in one write. The answers' header blocks are
decoded by ``hpack.Decoder``, every one of them in order, as HPACK requires (a block that
neither names nor changes its dynamic table, such as an APNs answer's, is read here
instead: the same fields, the table left as it was). What is
kept of the protocol (RFC 9113): SETTINGS and their ACK, PING's ACK, flow control both
ways (our windows opened by WINDOW_UPDATE, the server's windows and
``SETTINGS_INITIAL_WINDOW_SIZE`` respected, bodies held back until they open),
``SETTINGS_MAX_CONCURRENT_STREAMS``, ``SETTINGS_MAX_FRAME_SIZE`` (CONTINUATION frames
both ways), ``SETTINGS_HEADER_TABLE_SIZE`` (a dynamic table size update), padding,
informational answers and trailers, RST_STREAM and GOAWAY. A request beyond the stream
limit waits in the connection's queue and starts as another ends (no task, lock or
wake-up of its own). The adapter alone (``python -m bench.push_client``, 5,000 FCM /
3,000 APNs sends, a busy machine): FCM 0.47-0.52 ms of CPU a notification over ``h2``,
0.11 here; APNs 0.72-0.77, 0.13-0.18 (half of it ``hpack``'s decoding of each
answer's own ``apns-id``; read here, APNs 0.05 -> 0.04 ms on a busy machine).

What a failure says (the request's ``TryAgain``): a stream whose whole request (HEADERS
and the DATA ending it) was handed to the socket may have been acted on
(``maybe_sent``); one refused with ``REFUSED_STREAM``, above a GOAWAY's last stream, or
never written, was not. A lost connection, a protocol error or a timeout ends every stream
still open on it that way; the next request opens a new connection. A GOAWAY lets the
streams it covers finish, and new ones go to a new connection, as do the requests still
waiting there (or not yet written). ``HTTPS_PROXY`` /
``HTTP_PROXY`` (and ``NO_PROXY``) are honoured as httpx honours them: through a CONNECT
tunnel.
"""

from __future__ import annotations

import asyncio
import base64
import json
import socket
import ssl
import struct
import urllib.request
from collections import deque
from collections.abc import Sequence
from typing import Any, Self, cast
from urllib.parse import SplitResult, unquote, urlsplit

import certifi
import hpack
import hpack.exceptions
from hpack.huffman_table import decode_huffman
from hpack.table import HeaderTable

from tepat.ports.try_again import TryAgain

Headers = Sequence[tuple[str, str]]
# a POST: path, headers, varying headers, index_path, body (H2Client._post_many)
Post = tuple[str, Headers, Headers, bool, bytes]


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
    def __init__(self, what: str, maybe_sent: bool, elsewhere: bool = False) -> None:
        super().__init__(what)
        self.maybe_sent = maybe_sent
        self.elsewhere = elsewhere  # never started: it may go on another connection


class ProtocolError(Exception):
    """The server broke HTTP/2: the connection ends with a GOAWAY of ``code``."""

    def __init__(self, what: str, code: int = 1) -> None:  # 1: PROTOCOL_ERROR
        super().__init__(what)
        self.code = code


# ---- frames (RFC 9113, 4 and 6) ----

_FRAME = struct.Struct(">HBBBL")  # a 24-bit length as 16 + 8 bits, type, flags, stream
_SETTING = struct.Struct(">HL")
_DATA, _HEADERS, _RST, _SETTINGS, _PUSH, _PING, _GOAWAY, _WINDOW, _CONTINUATION = (
    0, 1, 3, 4, 5, 6, 7, 8, 9
)  # fmt: skip
_END_STREAM, _ACK, _END_HEADERS, _PADDED, _PRIORITY = 0x1, 0x1, 0x4, 0x8, 0x20
_CANCEL, _REFUSED = 0x8, 0x7
_MAX_WINDOW = 2**31 - 1
_DEFAULT_WINDOW = 65_535
_MIN_FRAME, _MAX_FRAME = 16_384, 2**24 - 1
# Our windows for what the server sends: a stream's answer and the connection's, opened
# again once half is used (answers are small: the connection's is opened every few
# thousand of them, a stream's almost never).
_RECEIVE_WINDOW = 2**24
_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
_TABLE_SIZE = 4096  # the most of the server's HPACK table our header blocks use


def _frame(kind: int, flags: int, stream_id: int, payload: bytes | memoryview = b"") -> bytes:
    n = len(payload)
    return _FRAME.pack(n >> 8, n & 0xFF, kind, flags, stream_id) + payload


def _window_update(stream_id: int, increment: int) -> bytes:
    return _frame(_WINDOW, 0, stream_id, increment.to_bytes(4, "big"))


_CLIENT_START = (
    _PREFACE
    # ENABLE_PUSH 0, INITIAL_WINDOW_SIZE
    + _frame(_SETTINGS, 0, 0, _SETTING.pack(2, 0) + _SETTING.pack(4, _RECEIVE_WINDOW))
    + _window_update(0, _RECEIVE_WINDOW - _DEFAULT_WINDOW)
)


def _unpad(flags: int, payload: bytes) -> bytes:
    if not flags & _PADDED:
        return payload
    if not payload or payload[0] >= len(payload):
        raise ProtocolError("padding longer than the frame")
    return payload[1 : len(payload) - payload[0]]


# ---- HPACK's encoding side (RFC 7541), without Huffman coding ----


def _integer(value: int, prefix_bits: int, first: int) -> bytes:
    limit = (1 << prefix_bits) - 1
    if value < limit:
        return bytes((first | value,))
    out = bytearray((first | limit,))
    value -= limit
    while value >= 128:
        out.append(value & 127 | 128)
        value >>= 7
    out.append(value)
    return bytes(out)


def _string(raw: bytes) -> bytes:
    return _integer(len(raw), 7, 0) + raw


_STATIC: dict[tuple[bytes, bytes], int] = {}
_STATIC_NAMES: dict[bytes, int] = {}
for _i, (_name, _value) in enumerate(HeaderTable.STATIC_TABLE, 1):
    _STATIC.setdefault((_name, _value), _i)
    _STATIC_NAMES.setdefault(_name, _i)


def _literal(name: bytes, value: bytes, indexing: bool) -> bytes:
    """A literal field, with incremental indexing or without indexing (6.2.1, 6.2.2)."""
    bits, first = (6, 0x40) if indexing else (4, 0x00)
    index = _STATIC_NAMES.get(name)
    head = _integer(index, bits, first) if index else bytes((first,)) + _string(name)
    return head + _string(value)


_LITERAL_NAMES: dict[str, bytes] = {}


def literal(name: str, value: str) -> bytes:
    """A header that changes from one request to the next: never in the dynamic table."""
    if (head := _LITERAL_NAMES.get(name)) is None:
        head = _LITERAL_NAMES[name] = _literal(name.encode(), b"", False)[:-1]
    raw = value.encode()
    return head + (bytes((len(raw),)) if len(raw) < 127 else _integer(len(raw), 7, 0)) + raw


class _Encoder:
    """The header blocks of one connection. A set of headers that stays the same from one
    request to the next is entered into the dynamic table once; once every one of them
    is there, its block (fields named by index) is cached and used as it is."""

    def __init__(self) -> None:
        self.size_limit = _TABLE_SIZE
        self.resize = False  # the next block starts with a dynamic table size update
        self.inserted = 0  # entries ever inserted: the newest is index 62
        self.entries: dict[tuple[bytes, bytes], int] = {}  # entry: its insertion number
        self.sizes: deque[tuple[tuple[bytes, bytes], int]] = deque()  # oldest first
        self.used = 0
        self.cache: dict[object, tuple[bytes, bytes]] = {}

    def server_table_size(self, size: int) -> None:
        # Emptied (size 0), then the new size: the server's table is then known empty.
        self.size_limit = min(size, _TABLE_SIZE)
        self.resize = True
        self.entries.clear()
        self.sizes.clear()
        self.used = 0
        self.cache.clear()

    def fixed(self, key: object, pseudo: Headers, regular: Headers) -> tuple[bytes, bytes]:
        """The blocks of ``pseudo`` and ``regular`` headers that stay the same (``key``
        names them): cached once every one of them is indexed."""
        inserted_before = self.inserted
        start = b""
        if self.resize:
            self.resize = False
            start = _integer(0, 5, 0x20) + _integer(self.size_limit, 5, 0x20)
        blocks = (start + self._fields(pseudo), self._fields(regular))
        if self.inserted == inserted_before:
            self.cache[key] = blocks
        else:
            self.cache.clear()  # indexes moved: blocks cached before may name others
        return blocks

    def _fields(self, headers: Headers) -> bytes:
        out = []
        for name, value in headers:
            field = (name.encode(), value.encode())
            index = _STATIC.get(field)
            if index is None and (number := self.entries.get(field)) is not None:
                index = 62 + self.inserted - 1 - number
            if index is not None:
                out.append(_integer(index, 7, 0x80))
                continue
            size = 32 + len(field[0]) + len(field[1])
            indexing = size <= self.size_limit
            out.append(_literal(*field, indexing))
            if indexing:
                self._insert(field, size)
        return b"".join(out)

    def _insert(self, field: tuple[bytes, bytes], size: int) -> None:
        # As the server's decoder does (RFC 7541, 4.4): the oldest go to make room.
        self.used += size
        while self.used > self.size_limit:
            oldest = self.inserted - len(self.sizes)
            old, old_size = self.sizes.popleft()
            self.used -= old_size
            if self.entries.get(old) == oldest:  # not when inserted again since
                del self.entries[old]
        self.entries[field] = self.inserted
        self.sizes.append((field, size))
        self.inserted += 1


_STATIC_TABLE: tuple[tuple[bytes, bytes], ...] = HeaderTable.STATIC_TABLE


def _prefixed(block: bytes, i: int, prefix: int) -> tuple[int, int]:
    """The integer of RFC 7541 5.1 at ``block[i]`` (an IndexError past the end), and the
    index after it."""
    mask = (1 << prefix) - 1
    value = block[i] & mask
    i += 1
    if value < mask:
        return value, i
    shift = 0
    while True:
        byte = block[i]
        i += 1
        value += (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, i


def _stateless_string(block: bytes, i: int) -> tuple[bytes, int]:
    length, start = _prefixed(block, i, 7)
    end = start + length
    if end > len(block):
        raise IndexError  # the block ends inside the string
    raw = block[start:end]
    return (decode_huffman(raw) if block[i] & 0x80 else raw), end


def _stateless(block: bytes, max_list_size: int) -> list[tuple[bytes, bytes]] | None:
    """The fields of a block that neither names nor adds a dynamic table entry, as
    ``hpack.Decoder`` decodes them; None for any other block, left to it (the table's
    changes, and every error, are then its own).

    Why: an APNs answer carries its own ``apns-id``, a literal not indexed, so no two
    blocks are alike and none is remembered; through ``hpack`` (its per-field tuples,
    memoryviews and debug calls) decoding one was half the adapter's CPU a notification.
    Such a block reads the same whatever the table holds, so decoding it here, aside
    from the table, leaves the decoder's state exactly as hpack would."""
    fields: list[tuple[bytes, bytes]] = []
    i, end, size = 0, len(block), 0
    try:
        while i < end:
            byte = block[i]
            if byte & 0x80:  # indexed: the static table's, else not decoded here
                index, i = _prefixed(block, i, 7)
                if not 0 < index <= len(_STATIC_TABLE):
                    return None
                field = _STATIC_TABLE[index - 1]
            elif byte & 0xE0 == 0:  # a literal without indexing, or never indexed
                index, i = _prefixed(block, i, 4)
                if index == 0:
                    name, i = _stateless_string(block, i)
                elif index <= len(_STATIC_TABLE):
                    name = _STATIC_TABLE[index - 1][0]
                else:
                    return None
                value, i = _stateless_string(block, i)
                field = (name, value)
            else:  # indexing a literal, or a table size update: the table changes
                return None
            fields.append(field)
            size += 32 + len(field[0]) + len(field[1])
            if size > max_list_size:
                return None
    except IndexError:  # the block ends inside a field
        return None
    return fields


class _Decoder:
    """``hpack``'s decoder, with the answer of a header block remembered while the
    dynamic table stays as it was: a server answers the same headers again and again
    (FCM's ``200``: the same block until the ``date`` changes), and a block that changed
    nothing in the table means the same thing the next time, until one changes it. A
    block that leaves the table alone is decoded here (:func:`_stateless`)."""

    def __init__(self) -> None:
        self.hpack = hpack.Decoder()
        self.known: dict[bytes, tuple[int, dict[str, str]]] = {}

    def decode(self, block: bytes) -> tuple[int, dict[str, str]]:
        """The ``:status`` (0 when absent) and the other headers of a header block."""
        if (known := self.known.get(block)) is not None:
            return known
        decoder = self.hpack
        stateless = None
        if decoder.header_table_size <= decoder.max_allowed_table_size:  # else hpack raises
            stateless = _stateless(block, decoder.max_header_list_size)
        table = decoder.header_table
        entries = table.dynamic_entries
        newest, count, size = entries[0] if entries else None, len(entries), table.maxsize
        fields = decoder.decode(block, raw=True) if stateless is None else stateless
        status, headers = 0, {}
        for name, value in fields:
            if name == b":status":
                status = int(value)
            else:
                headers[bytes(name).decode()] = bytes(value).decode("latin-1")
        # An entry added is a new tuple (``is``, not ``==``: the same field added again
        # is a change too).
        added = (entries[0] if entries else None) is not newest
        if added or len(entries) != count or table.maxsize != size:
            self.known.clear()
        elif len(self.known) < 64:
            self.known[block] = status, headers
        return status, headers


# a request waiting for a stream: its answer's future, then a Post's parts
_Request = tuple["asyncio.Future[H2Response]", str, Headers, Headers, bool, bytes]


class _Stream:
    __slots__ = ("answer", "body", "headers", "received", "status", "window", "written")

    def __init__(self, answer: asyncio.Future[H2Response], window: int) -> None:
        self.answer = answer
        self.status = 0  # until its final (not 1xx) headers came
        self.headers: dict[str, str] = {}
        self.body = b""
        self.written = False  # its request's last frame went to the socket
        self.window = window  # what we may still send on it
        self.received = 0  # bytes of its answer since we last opened its window


class _Connection(asyncio.Protocol):
    """The frames of one connection; streams end in their ``answer`` future."""

    def __init__(
        self, timeout: float, limit: int, pseudo: Headers, user_agent: str, base_path: str
    ) -> None:
        self.timeout = timeout
        self.own_limit = limit
        # Set by the server's first SETTINGS: how many streams it allows is known.
        self.settled: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.limit = limit  # streams at once: ours, or the server's if lower
        self.pseudo = pseudo  # :method, :scheme, :authority
        self.user_agent = ("user-agent", user_agent)
        self.base_path = base_path
        self.encoder = _Encoder()
        self.decoder = _Decoder()
        self.streams: dict[int, _Stream] = {}
        # Requests waiting for a stream, started as others end: no task or future of
        # their own to wake, and no wait for the next turn of the loop.
        self.queued: deque[_Request] = deque()
        self.next_id = 1
        self.unsent: dict[int, memoryview] = {}  # bodies the flow-control windows hold back
        self.out: list[bytes] = []  # frames for the next write
        self.ending: list[_Stream] = []  # their last frame is in ``out``
        self.started: list[int] = []  # streams opened since the last write, to time out
        self.usable = True  # False once lost or told to go away: new streams go elsewhere
        self.transport: asyncio.Transport | None = None
        self._flush_due = False
        self.buffer = b""
        self.continuing: tuple[int, int, list[bytes]] | None = None  # stream, flags, block
        # the server's settings (RFC 9113, 6.5.2)
        self.initial_window = _DEFAULT_WINDOW
        self.max_frame = _MIN_FRAME
        self.window = _DEFAULT_WINDOW  # the connection's, for what we send
        self.received = 0  # answer bytes since we last opened the connection's window

    # ---- asyncio's side ----

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's (``tepat serve``) is a transport of this shape but not this class.
        self.transport = cast(asyncio.Transport, transport)
        self.out.append(_CLIENT_START)
        self._flush()

    def data_received(self, data: bytes) -> None:
        buffer = self.buffer + data if self.buffer else data
        at, end = 0, len(buffer)
        try:
            while end - at >= 9:
                high, low, kind, flags, stream_id = _FRAME.unpack_from(buffer, at)
                size = high << 8 | low
                if size > _MIN_FRAME:  # the largest we allow (our SETTINGS_MAX_FRAME_SIZE)
                    raise ProtocolError(f"a frame of {size} bytes", 6)  # FRAME_SIZE_ERROR
                if end - at - 9 < size:
                    break
                payload = buffer[at + 9 : at + 9 + size]
                at += 9 + size
                self._on_frame(kind, flags, stream_id & _MAX_WINDOW, payload)
        except (ProtocolError, hpack.exceptions.HPACKError, ValueError) as e:
            code = e.code if isinstance(e, ProtocolError) else 9  # COMPRESSION_ERROR
            self.out.append(_frame(_GOAWAY, 0, 0, struct.pack(">LL", 0, code)))
            self._flush()
            self._fail_all(f"HTTP/2 protocol error ({e})")
            return
        self.buffer = buffer[at:]
        self._flush()

    def eof_received(self) -> None:
        # The server closed (an idle connection, say): the loop may run a new request
        # before connection_lost, and it must not go here.
        self._retire()

    def connection_lost(self, exc: Exception | None) -> None:
        self._fail_all(f"connection lost ({exc or 'closed by the server'})")

    # ---- a request ----

    def submit(
        self, path: str, headers: Headers, varying: Headers, index_path: bool, body: bytes
    ) -> asyncio.Future[H2Response]:
        """A request, started at once or when a stream is free; its answer's future."""
        answer: asyncio.Future[H2Response] = asyncio.get_running_loop().create_future()
        request = (answer, path, headers, varying, index_path, body)
        if self.queued or len(self.streams) >= self.limit:
            self.queued.append(request)
        else:
            self._start(request)
        return answer

    def _start(self, request: _Request) -> None:
        answer, path, headers, varying, index_path, body = request
        stream_id = self.next_id
        self.next_id += 2
        if self.next_id > _MAX_WINDOW:
            self._retire()  # stream ids used up: the next request opens another connection
        stream = self.streams[stream_id] = _Stream(answer, self.initial_window)
        # Encoded right before its frame is queued: blocks must reach the server in the
        # order they were encoded (the dynamic table is in both's view of it).
        self._send_headers(stream_id, self._block(path, headers, varying, index_path), not body)
        if not body:
            self.ending.append(stream)
        elif (
            not self.unsent
            and len(body) <= self.window
            and len(body) <= stream.window
            and len(body) <= self.max_frame
        ):
            self.window -= len(body)
            stream.window -= len(body)
            self.out.append(_frame(_DATA, _END_STREAM, stream_id, body))
            self.ending.append(stream)
        else:
            self.unsent[stream_id] = memoryview(body)
            self._send_bodies()
        self.started.append(stream_id)
        if not self._flush_due:
            # One write for every request started in this turn of the loop.
            self._flush_due = True
            asyncio.get_running_loop().call_soon(self._flush)

    def _start_queued(self) -> None:
        while self.queued and self.usable and len(self.streams) < self.limit:
            request = self.queued.popleft()
            if not request[0].done():  # its caller gave up waiting
                self._start(request)

    def _retire(self) -> None:
        """No new streams here: the waiting requests go to another connection."""
        self.usable = False
        while self.queued:
            answer = self.queued.popleft()[0]
            if not answer.done():
                answer.set_exception(StreamFailed("connection closing", False, elsewhere=True))

    def _block(self, path: str, headers: Headers, varying: Headers, index_path: bool) -> bytes:
        key = (path if index_path else None, headers)
        blocks = self.encoder.cache.get(key)
        if blocks is None or self.encoder.resize:
            pseudo = [*self.pseudo, (":path", self.base_path + path)] if index_path else self.pseudo
            blocks = self.encoder.fixed(key, pseudo, [self.user_agent, *headers])
        block = blocks[0]
        if not index_path:
            block += literal(":path", self.base_path + path)
        block += blocks[1]
        for name, value in varying:
            block += literal(name, value)
        return block

    def _send_headers(self, stream_id: int, block: bytes, end_stream: bool) -> None:
        flags = _END_STREAM if end_stream else 0
        size = self.max_frame
        if len(block) <= size:
            self.out.append(_frame(_HEADERS, flags | _END_HEADERS, stream_id, block))
            return
        chunks = [block[i : i + size] for i in range(0, len(block), size)]
        self.out.append(_frame(_HEADERS, flags, stream_id, chunks[0]))
        for chunk in chunks[1:-1]:
            self.out.append(_frame(_CONTINUATION, 0, stream_id, chunk))
        self.out.append(_frame(_CONTINUATION, _END_HEADERS, stream_id, chunks[-1]))

    def _send_bodies(self) -> None:
        for stream_id, rest in list(self.unsent.items()):
            stream = self.streams[stream_id]
            size = min(len(rest), self.window, stream.window, self.max_frame)
            if size <= 0:
                continue
            last = size == len(rest)
            self.window -= size
            stream.window -= size
            self.out.append(_frame(_DATA, _END_STREAM if last else 0, stream_id, rest[:size]))
            if last:
                del self.unsent[stream_id]
                self.ending.append(stream)
            else:
                self.unsent[stream_id] = rest[size:]

    def _flush(self) -> None:
        self._flush_due = False
        if self.started:
            # One timer for the streams started in this turn, not one each.
            started, self.started = self.started, []
            asyncio.get_running_loop().call_later(self.timeout, self._time_out, started)
        if not self.out:
            return
        data = b"".join(self.out)
        self.out.clear()
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(data)
            for stream in self.ending:
                stream.written = True
        self.ending.clear()

    # ---- what the server says ----

    def _on_frame(self, kind: int, flags: int, stream_id: int, payload: bytes) -> None:
        if self.continuing is not None:
            if kind != _CONTINUATION or stream_id != self.continuing[0]:
                raise ProtocolError("a header block left unfinished")
            self.continuing[2].append(payload)
            if flags & _END_HEADERS:
                continued, end_flags, parts = self.continuing
                self.continuing = None
                self._headers(continued, end_flags, b"".join(parts))
        elif kind == _HEADERS:
            if not stream_id:
                raise ProtocolError("HEADERS on stream 0")
            block = _unpad(flags, payload)
            if flags & _PRIORITY:
                block = block[5:]
            if flags & _END_HEADERS:
                self._headers(stream_id, flags, block)
            else:
                self.continuing = (stream_id, flags, [block])
        elif kind == _DATA:
            self._data(stream_id, flags, payload)
        elif kind == _SETTINGS:
            if not flags & _ACK:
                self._settings(stream_id, payload)
        elif kind == _WINDOW:
            self._window_update(stream_id, payload)
        elif kind == _PING:
            if len(payload) != 8 or stream_id:
                raise ProtocolError("a malformed PING", 6)
            if not flags & _ACK:
                self.out.append(_frame(_PING, _ACK, 0, payload))
        elif kind == _RST:
            if len(payload) != 4 or not stream_id:
                raise ProtocolError("a malformed RST_STREAM", 6)
            code = int.from_bytes(payload, "big")
            what = f"stream reset ({_error_name(code)})"
            # Refused: the server did not process it (RFC 9113, 8.7), so it goes again at
            # once, on a connection with room, not as a failed send.
            refused = code == _REFUSED
            self._fail(stream_id, what, not refused, reset=False, elsewhere=refused)
        elif kind == _GOAWAY:
            self._go_away(payload)
        elif kind in (_PUSH, _CONTINUATION):
            what = "PUSH_PROMISE, which we disabled" if kind == _PUSH else "a stray CONTINUATION"
            raise ProtocolError(what)
        # PRIORITY and frame types unknown to us are ignored (RFC 9113, 4.1, 5.5).

    def _headers(self, stream_id: int, flags: int, block: bytes) -> None:
        # Decoded even for a stream we no longer wait on: the table is the connection's.
        status, headers = self.decoder.decode(block)
        stream = self.streams.get(stream_id)
        # An informational answer comes before the answer; after it, trailers: unread.
        if stream is not None and not stream.status and not 100 <= status < 200:
            stream.status, stream.headers = status, dict(headers)
        if flags & _END_STREAM:
            self._answered(stream_id)

    def _data(self, stream_id: int, flags: int, payload: bytes) -> None:
        if not stream_id:
            raise ProtocolError("DATA on stream 0")
        # Flow control counts the whole frame, its padding too (RFC 9113, 6.9.1).
        self.received += len(payload)
        if self.received >= _RECEIVE_WINDOW // 2:
            self.out.append(_window_update(0, self.received))
            self.received = 0
        stream = self.streams.get(stream_id)
        if stream is not None:
            stream.body += _unpad(flags, payload)
            stream.received += len(payload)
            if stream.received >= _RECEIVE_WINDOW // 2 and not flags & _END_STREAM:
                self.out.append(_window_update(stream_id, stream.received))
                stream.received = 0
        if flags & _END_STREAM:
            self._answered(stream_id)

    def _settings(self, stream_id: int, payload: bytes) -> None:
        if stream_id or len(payload) % 6:
            raise ProtocolError("a malformed SETTINGS", 6)
        for at in range(0, len(payload), 6):
            code, value = _SETTING.unpack_from(payload, at)
            if code == 1:  # HEADER_TABLE_SIZE
                self.encoder.server_table_size(value)
            elif code == 3:  # MAX_CONCURRENT_STREAMS
                self.limit = min(self.own_limit, value)
            elif code == 4:  # INITIAL_WINDOW_SIZE: open streams' windows move by the change
                if value > _MAX_WINDOW:
                    raise ProtocolError("SETTINGS_INITIAL_WINDOW_SIZE too large", 3)
                for stream in self.streams.values():
                    stream.window += value - self.initial_window
                self.initial_window = value
            elif code == 5:  # MAX_FRAME_SIZE
                if not _MIN_FRAME <= value <= _MAX_FRAME:
                    raise ProtocolError("SETTINGS_MAX_FRAME_SIZE out of range")
                self.max_frame = value
        self.out.append(_frame(_SETTINGS, _ACK, 0))
        if not self.settled.done():
            self.settled.set_result(None)
        self._send_bodies()
        self._start_queued()

    def _window_update(self, stream_id: int, payload: bytes) -> None:
        if len(payload) != 4:
            raise ProtocolError("a malformed WINDOW_UPDATE", 6)
        increment = int.from_bytes(payload, "big") & _MAX_WINDOW
        if not increment:
            raise ProtocolError("a WINDOW_UPDATE of 0")
        if not stream_id:
            self.window += increment
            if self.window > _MAX_WINDOW:
                raise ProtocolError("the connection's window over 2^31-1", 3)
        elif stream := self.streams.get(stream_id):
            stream.window += increment
            if stream.window > _MAX_WINDOW:
                self._reset(stream_id, 3)  # FLOW_CONTROL_ERROR, of this stream only
                self._fail(stream_id, "its window over 2^31-1", True, reset=False)
        if self.unsent:
            self._send_bodies()

    def _go_away(self, payload: bytes) -> None:
        if len(payload) < 8:
            raise ProtocolError("a malformed GOAWAY", 6)
        last, code = struct.unpack_from(">LL", payload)
        last &= _MAX_WINDOW
        self._retire()
        what = f"the server went away (GOAWAY {_error_name(code)})"
        for stream_id in [s for s in self.streams if s > last]:
            # Never processed (RFC 9113, 6.8); one not even written yet goes elsewhere.
            elsewhere = stream_id in self.started
            self._fail(stream_id, what, False, elsewhere=elsewhere)
        if not self.streams and self.transport is not None:
            self.transport.close()

    def _answered(self, stream_id: int) -> None:
        if stream := self._end(stream_id):
            if not stream.status:
                failure = StreamFailed("an answer without a :status", stream.written)
                stream.answer.set_exception(failure)
            else:
                stream.answer.set_result(H2Response(stream.status, stream.headers, stream.body))

    def _end(self, stream_id: int, reset: bool = True) -> _Stream | None:
        stream = self.streams.pop(stream_id, None)
        if self.unsent.pop(stream_id, None) is not None and reset:
            # Ended before its whole body went: close our side too (RFC 9113, 8.1).
            self._reset(stream_id, 0)  # NO_ERROR
        if self.queued:
            self._start_queued()
        if not self.usable and not self.streams and self.transport is not None:
            self.transport.close()  # gone away, its last stream answered
        return stream if stream is not None and not stream.answer.done() else None

    def _fail(
        self, stream_id: int, what: str, maybe: bool, reset: bool = True, elsewhere: bool = False
    ) -> None:
        if stream := self._end(stream_id, reset):
            stream.answer.set_exception(StreamFailed(what, maybe and stream.written, elsewhere))

    def _time_out(self, stream_ids: list[int]) -> None:
        late = [s for s in stream_ids if s in self.streams]
        for stream_id in late:
            self._reset(stream_id, _CANCEL)
            self._fail(stream_id, f"timeout (no answer in {self.timeout:g} s)", True, reset=False)
        if late:
            self._flush()

    def _reset(self, stream_id: int, code: int) -> None:
        self.out.append(_frame(_RST, 0, stream_id, code.to_bytes(4, "big")))

    def _fail_all(self, what: str) -> None:
        self._retire()
        if not self.settled.done():
            self.settled.set_result(None)  # no SETTINGS will come: not waited for
        for stream_id in list(self.streams):
            self._fail(stream_id, what, True)
        if self.transport is not None:
            self.transport.close()


# Connections an adapter opens at most (each with the streams its server allows).
MAX_CONNECTIONS = 32

_ERRORS = (
    "NO_ERROR",
    "PROTOCOL_ERROR",
    "INTERNAL_ERROR",
    "FLOW_CONTROL_ERROR",
    "SETTINGS_TIMEOUT",
    "STREAM_CLOSED",
    "FRAME_SIZE_ERROR",
    "REFUSED_STREAM",
    "CANCEL",
    "COMPRESSION_ERROR",
    "CONNECT_ERROR",
    "ENHANCE_YOUR_CALM",
    "INADEQUATE_SECURITY",
    "HTTP_1_1_REQUIRED",
)


def _error_name(code: int) -> str:
    return _ERRORS[code] if code < len(_ERRORS) else f"error {code:#x}"


class H2Client:
    """Base of an adapter that sends over HTTP/2 to ``base_url``, about ``max_streams``
    requests in flight at once, the others waiting their turn (``http://``: h2c with
    prior knowledge, as the sandboxes serve; ``https://``: TLS with ALPN ``h2``). Waiting
    for a stream is no failure: the timeout counts once it opens.

    One connection, and more while the requests in hand outgrow the streams the server
    allows on those open (its ``SETTINGS_MAX_CONCURRENT_STREAMS``), up to
    ``max_streams`` in all: FCM's front ends allow 100 streams on a connection, so 1,200
    notifications due at once would otherwise go in twelve round trips. A request goes
    to the connection with the most streams free."""

    def __init__(self, base_url: str, *, max_streams: int, timeout: float, user_agent: str) -> None:
        self.base_url = base_url.rstrip("/")
        self._url = url = urlsplit(self.base_url)
        self._tls = url.scheme == "https"
        self._port = url.port or (443 if self._tls else 80)
        self._user_agent = user_agent
        self._pseudo = ((":method", "POST"), (":scheme", url.scheme), (":authority", url.netloc))
        self.timeout = timeout  # seconds: to connect, and for a stream's answer
        self._max_streams = max_streams
        self._connections: list[_Connection] = []
        self._connecting = asyncio.Lock()

    async def _post_many(
        self, provider: str, requests: Sequence[Post]
    ) -> list[H2Response | TryAgain]:
        """POST each of ``requests`` at once: their answers in order (no task of their own:
        the answers are futures this one waits on); a failure is TryAgain, maybe sent as
        the module's docstring says. A request's headers (and its path, if ``index_path``)
        should stay the same from one request to the next: they are entered into HPACK's
        dynamic table; its varying headers are not."""
        answers: dict[int, H2Response | TryAgain] = {}
        todo = list(range(len(requests)))
        for _ in range(3):  # requests that waited on a connection that went: another one
            try:
                connections = await self._connected(len(todo))
            except (OSError, TimeoutError, ssl.SSLError) as e:
                failure = StreamFailed(f"cannot connect ({type(e).__name__}: {e})", False)
                for i in todo:
                    answers[i] = _try_again(failure, provider)
                break
            places = _places(connections, len(todo))
            futures = [(i, c.submit(*requests[i])) for i, c in zip(todo, places, strict=True)]
            # Written now, not at the end of this turn of the loop: at an instant when
            # many requests are due, the server reads these while the next are encoded.
            for connection in dict.fromkeys(places):
                connection._flush()
            todo = []
            try:
                for i, future in futures:
                    try:
                        answer: H2Response | TryAgain = await future
                    except StreamFailed as e:
                        answer = _try_again(e, provider)
                        if e.elsewhere:
                            todo.append(i)
                    answers[i] = answer
            except BaseException:
                for _, future in futures:
                    future.cancel()  # a cancelled wait: their answers are no one's now
                raise
            if not todo:
                break
        return [answers[i] for i in range(len(requests))]

    async def _connected(self, requests: int) -> list[_Connection]:
        """The usable connections, at least one, and more while their streams hold less
        than what is in flight and ``requests`` more (up to ``max_streams``)."""
        async with self._connecting:
            self._connections = [c for c in self._connections if c.usable]
            if not self._connections:
                self._connections.append(await self._open())
            busy = sum(len(c.streams) + len(c.queued) for c in self._connections)
            short = min(busy + requests, self._max_streams) - sum(
                c.limit for c in self._connections
            )
            if short > 0:
                # As many more as the server's limit on those open says, opened together:
                # one after the other, each waiting for its SETTINGS, they held 1,200
                # notifications due at once back by tens of milliseconds.
                per = max(1, min(c.limit for c in self._connections))
                more = min(-(-short // per), MAX_CONNECTIONS - len(self._connections))
                opened = await asyncio.gather(
                    *(self._open() for _ in range(more)), return_exceptions=True
                )
                # One that failed to open leaves the requests to those that did.
                self._connections += [c for c in opened if isinstance(c, _Connection)]
        return list(self._connections)

    async def _open(self) -> _Connection:
        opened = await asyncio.wait_for(self._connect(), self.timeout)
        if not opened.usable:
            raise ConnectionError("the connection was lost as it opened")
        return opened

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
            lambda: _Connection(
                self.timeout, self._max_streams, self._pseudo, self._user_agent, self._url.path
            ),
            ssl=context,
            **where,
        )
        tls = transport.get_extra_info("ssl_object")
        if tls is not None and tls.selected_alpn_protocol() != "h2":
            transport.close()
            raise ssl.SSLError(f"{self._url.hostname} does not speak HTTP/2 (ALPN)")
        # How many streams the server allows is in its first SETTINGS, sent at once:
        # until then a connection would take every request (RFC 9113 lets a client
        # assume no limit), and a server allowing 100 refuses the rest, so no request
        # goes to it before them, and whether more connections are needed is known.
        try:
            await asyncio.wait_for(asyncio.shield(connection.settled), self.timeout)
        except BaseException:
            transport.close()
            raise
        return connection

    async def close(self) -> None:
        for connection in self._connections:
            if connection.transport is not None:
                connection.transport.close()
        self._connections = []

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


def _places(connections: Sequence[_Connection], n: int) -> list[_Connection]:
    """The connection each of ``n`` requests goes to: where the most streams are free
    (queued ones count as taken), one at a time."""
    if len(connections) == 1:
        return [connections[0]] * n
    free = [c.limit - len(c.streams) - len(c.queued) for c in connections]
    places = []
    for _ in range(n):
        best = max(range(len(connections)), key=free.__getitem__)
        free[best] -= 1
        places.append(connections[best])
    return places


def _try_again(failure: StreamFailed, provider: str) -> TryAgain:
    when = "after the request was sent" if failure.maybe_sent else "before it was sent"
    return TryAgain(f"{failure} talking to {provider} {when}", maybe_sent=failure.maybe_sent)


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
