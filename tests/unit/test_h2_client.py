"""The lean HTTP/2 client of FCM and APNs (tepat/adapters/h2_client.py) against an h2
server scripted per test: many streams on one connection, flow control, and what each
way of failing says about whether the request may have been acted on."""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import cast

import h2.config
import h2.connection
import h2.errors
import h2.events
import h2.settings
import hpack
import hpack.exceptions
import pytest
import uvloop

from tepat.adapters.h2_client import H2Client, H2Response, _Decoder
from tepat.ports.try_again import TryAgain

# What the server does with a request whose body it has (stream id, body): None answers
# 200 with the body echoed.
Script = Callable[["Server", int, bytes], None]


class Server(asyncio.Protocol):
    def __init__(
        self,
        script: Script | None,
        window: int | None,
        connections: list[Server],
        settings: dict[int, int] | None = None,
        settings_after: float = 0.0,
    ):
        self.h2 = h2.connection.H2Connection(h2.config.H2Configuration(client_side=False))
        self.script, self.window, self.settings = script, window, settings
        # Its SETTINGS this many seconds after it was connected to, as from a server a
        # round trip away; what comes meanwhile is read after them.
        self.settings_after = settings_after
        self.early: list[bytes] | None = None
        self.bodies: dict[int, bytearray] = {}
        self.headers: dict[int, dict[str, str]] = {}  # each request's, as the server read them
        self.done: list[bytes] = []
        self.most_open = 0  # streams open at once, at most
        self.events: list[h2.events.Event] = []
        connections.append(self)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's too
        if self.settings_after:
            self.early = []
            asyncio.get_running_loop().call_later(self.settings_after, self.speak)
        else:
            self.speak()

    def speak(self) -> None:
        if self.settings:  # in the server's first SETTINGS, as a real server sends them
            initial = {h2.settings.SettingCodes(k): v for k, v in self.settings.items()}
            self.h2.local_settings = h2.settings.Settings(client=False, initial_values=initial)
        self.h2.initiate_connection()
        if self.window is not None:
            self.h2.update_settings({h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: self.window})
        self.flush()
        if self.early is not None:
            early, self.early = self.early, None
            for data in early:
                self.data_received(data)

    def data_received(self, data: bytes) -> None:
        if self.early is not None:
            self.early.append(data)
            return
        for event in self.h2.receive_data(data):
            self.events.append(event)
            if isinstance(event, h2.events.RequestReceived):
                self.bodies[event.stream_id] = bytearray()
                self.headers[event.stream_id] = {
                    bytes(k).decode(): bytes(v).decode() for k, v in event.headers or ()
                }
                self.most_open = max(self.most_open, self.h2.open_inbound_streams)
                if self.window == 0:  # the body can never come
                    self.transport.close()
                    return
            elif isinstance(event, h2.events.DataReceived):
                self.bodies[event.stream_id] += event.data
                self.h2.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
            elif isinstance(event, h2.events.StreamEnded):
                body = bytes(self.bodies[event.stream_id])
                self.done.append(body)
                if self.script is None:
                    self.answer(event.stream_id, body)
                else:
                    self.script(self, event.stream_id, body)
        self.flush()

    def answer(self, stream_id: int, body: bytes) -> None:
        self.h2.send_headers(stream_id, [(":status", "200"), ("x-seen", "yes")])
        self.h2.send_data(stream_id, body, end_stream=True)

    def flush(self) -> None:
        if not self.transport.is_closing():
            self.transport.write(self.h2.data_to_send())


@asynccontextmanager
async def serving(
    script: Script | None = None,
    window: int | None = None,
    answer_within: float = 10.0,
    settings: dict[int, int] | None = None,
    max_streams: int = 50,
    settings_after: float = 0.0,
) -> AsyncIterator[tuple[H2Client, list[Server]]]:
    connections: list[Server] = []
    loop = asyncio.get_running_loop()
    server = await loop.create_server(
        lambda: Server(script, window, connections, settings, settings_after), "127.0.0.1"
    )
    port = server.sockets[0].getsockname()[1]
    client = H2Client(
        f"http://127.0.0.1:{port}",
        max_streams=max_streams,
        timeout=answer_within,
        user_agent="test",
    )
    try:
        yield client, connections
    finally:
        await client.close()
        server.close()


async def post(client: H2Client, body: bytes) -> H2Response | TryAgain:
    request = ("/send", (("content-type", "text/plain"),), (), True, body)
    return (await client._post_many("Test", [request]))[0]


async def test_many_requests_are_streams_of_one_connection() -> None:
    async with serving() as (client, connections):
        bodies = [f"n{i}".encode() * 50 for i in range(120)]
        answers = await asyncio.gather(*(post(client, b) for b in bodies))
        assert [a.content for a in answers if isinstance(a, H2Response)] == bodies
        assert {(a.status_code, a.headers["x-seen"]) for a in answers} == {(200, "yes")}  # type: ignore[union-attr]
        assert len(connections) == 1


def test_it_sends_on_uvloop_as_tepat_serve_runs() -> None:
    async def one() -> H2Response | TryAgain:
        async with serving() as (client, _):
            return await post(client, b"on uvloop")

    answer = uvloop.run(one())
    assert isinstance(answer, H2Response) and answer.content == b"on uvloop"


async def test_the_headers_reach_the_server_as_sent_whatever_its_hpack_table_size() -> None:
    # The unchanging headers go into the server's HPACK table once, then by index; a
    # server with a small table (or none) must read the same.
    for size in (None, 0, 200):
        settings: dict[int, int] | None = None
        if size is not None:
            settings = {h2.settings.SettingCodes.HEADER_TABLE_SIZE: size}
        async with serving(settings=settings) as (client, connections):
            tokens = ["a" * 150, "b" * 150, "a" * 150]  # a token renewed, then the old one
            for token in tokens:
                answers = await asyncio.gather(
                    *(
                        client._post_many(
                            "Test",
                            [
                                (
                                    f"/send/{i % 2}",
                                    (("authorization", f"Bearer {token}"), ("x-big", "v" * 5000)),
                                    [("x-id", str(i))],
                                    i % 2 == 0,
                                    b"x",
                                )
                            ],
                        )
                        for i in range(6)
                    )
                )
                assert all(isinstance(a, H2Response) for [a] in answers), answers
            seen = list(connections[0].headers.values())
        assert len(seen) == 18, size
        for n, headers in enumerate(seen):
            assert headers[":path"] == f"/send/{n % 6 % 2}" and headers["x-id"] == str(n % 6)
            assert headers["authorization"] == f"Bearer {tokens[n // 6]}"
            assert (headers[":method"], headers["user-agent"]) == ("POST", "test")
            assert headers["x-big"] == "v" * 5000


async def test_it_keeps_to_the_servers_stream_limit_and_acks_its_pings() -> None:
    def answer_and_ping(server: Server, stream_id: int, body: bytes) -> None:
        server.answer(stream_id, body)
        server.h2.ping(b"12345678")

    limit: dict[int, int] = {h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS: 3}
    async with serving(answer_and_ping, settings=limit) as (client, connections):
        answers = await asyncio.gather(*(post(client, b"%d" % i) for i in range(20)))
        assert [a.content for a in answers if isinstance(a, H2Response)] == [
            b"%d" % i for i in range(20)
        ]
        assert connections[0].most_open <= 3
        acks = [e for e in connections[0].events if isinstance(e, h2.events.PingAckReceived)]
        assert acks


async def test_headers_larger_than_a_frame_come_in_continuation_frames() -> None:
    def big_headers(server: Server, stream_id: int, body: bytes) -> None:
        server.h2.send_headers(stream_id, [(":status", "200"), ("x-big", "z" * 40_000)])
        server.h2.send_data(stream_id, body, end_stream=True)

    async with serving(big_headers) as (client, _):
        answers = await asyncio.gather(post(client, b"one"), post(client, b"two"))
    assert [a.headers["x-big"] for a in answers if isinstance(a, H2Response)] == ["z" * 40_000] * 2


async def test_requests_waiting_for_a_stream_go_to_a_new_connection_after_goaway() -> None:
    def go_away_at_zero(server: Server, stream_id: int, body: bytes) -> None:
        server.answer(stream_id, body)
        if body == b"0":
            server.h2.close_connection(last_stream_id=stream_id)
            server.flush()
            server.transport.close()

    limit: dict[int, int] = {h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS: 1}
    # One stream in all: the client opens no second connection while the first is busy.
    async with serving(go_away_at_zero, settings=limit, max_streams=1) as (client, connections):
        assert isinstance(await post(client, b"connects"), H2Response)
        # One stream at a time: 1 and 2 wait, never sent when the server goes away.
        answers = await asyncio.gather(*(post(client, b"%d" % i) for i in range(3)))
        assert [a.content for a in answers if isinstance(a, H2Response)] == [b"0", b"1", b"2"]
        assert len(connections) == 2 and connections[0].most_open == 1
        assert connections[0].done == [b"connects", b"0"]


async def test_more_requests_than_a_connection_takes_open_more_connections() -> None:
    """The server allows 2 streams on a connection: 6 requests at once, the client's
    ``max_streams``, go over 3 connections instead of waiting in line on one."""
    held: list[tuple[Server, int, bytes]] = []

    def answer_once_six_are_in(server: Server, stream_id: int, body: bytes) -> None:
        if body == b"connects":
            server.answer(stream_id, body)
            return
        held.append((server, stream_id, body))
        if len(held) == 6:
            for at, sid, data in held:
                at.answer(sid, data)
                at.flush()
            held.clear()

    limit: dict[int, int] = {h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS: 2}
    async with serving(answer_once_six_are_in, settings=limit, max_streams=6) as (
        client,
        connections,
    ):
        assert isinstance(await post(client, b"connects"), H2Response)
        for _ in range(2):  # the second time on the connections the first opened
            answers = await asyncio.gather(*(post(client, b"%d" % i) for i in range(6)))
            assert [a.content for a in answers if isinstance(a, H2Response)] == [
                b"%d" % i for i in range(6)
            ]
            assert len(connections) == 3
            assert all(c.most_open <= 2 for c in connections)


async def test_a_first_burst_keeps_to_the_stream_limit_of_servers_it_has_not_heard() -> None:
    """Six requests on a fresh client, the server allowing 2 streams a connection: each
    connection waits for the server's SETTINGS before requests go on it, so none is
    refused (a refusal would come back as a failed send, retried later)."""
    held: list[tuple[Server, int, bytes]] = []
    refused: list[bytes] = []

    def as_fcm_does(server: Server, stream_id: int, body: bytes) -> None:
        # FCM's front ends refuse a stream past the limit whether or not the client has
        # acknowledged it (h2's own server waits for the acknowledgement).
        if sum(at is server for at, _, _ in held) >= 2:
            refused.append(body)
            server.h2.reset_stream(stream_id, h2.errors.ErrorCodes.REFUSED_STREAM)
            return
        held.append((server, stream_id, body))
        if len(held) == 6:  # answered once all are in: each took a stream at once
            for at, sid, data in held:
                at.answer(sid, data)
                at.flush()

    limit: dict[int, int] = {h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS: 2}
    posts = [("/send", (), (), True, b"%d" % i) for i in range(6)]
    async with serving(as_fcm_does, settings=limit, max_streams=6, settings_after=0.05) as (
        client,
        connections,
    ):
        answers = await client._post_many("Test", posts)
    assert [a.content for a in answers if isinstance(a, H2Response)] == [
        b"%d" % i for i in range(6)
    ]
    assert refused == [] and len(connections) == 3


async def test_a_stream_refused_once_goes_again_at_once() -> None:
    refused: list[bytes] = []

    def refuse_first(server: Server, stream_id: int, body: bytes) -> None:
        if body not in refused:
            refused.append(body)
            server.h2.reset_stream(stream_id, h2.errors.ErrorCodes.REFUSED_STREAM)
            return
        server.answer(stream_id, body)

    async with serving(refuse_first) as (client, connections):
        answer = await post(client, b"hello")
    assert isinstance(answer, H2Response) and answer.content == b"hello"
    assert refused == [b"hello"] and len(connections[0].done) == 2


async def test_a_body_larger_than_the_window_goes_as_the_server_opens_it() -> None:
    async with serving(window=1000) as (client, _):
        body = bytes(range(256)) * 40  # 10 KB through a 1 KB stream window
        answers = await asyncio.gather(post(client, body), post(client, body[:10]))
        assert [a.content for a in answers if isinstance(a, H2Response)] == [body, body[:10]]


async def test_goaway_fails_the_streams_it_never_took_as_not_sent_then_reconnects() -> None:
    def go_away_at_the_second(server: Server, stream_id: int, body: bytes) -> None:
        if len(server.done) <= 2:  # the others of its write are left unprocessed
            server.answer(stream_id, body)
        if len(server.done) == 2:
            server.h2.close_connection(last_stream_id=stream_id)
            server.flush()
            server.transport.close()

    async with serving(go_away_at_the_second) as (client, connections):
        assert isinstance(await post(client, b"connects"), H2Response)
        # Five started in one turn of the loop leave in one write.
        second, *rest = await asyncio.gather(*(post(client, b"x") for _ in range(5)))
        assert isinstance(second, H2Response)
        # Each one the server never took (above GOAWAY's last stream) was not sent.
        assert all(isinstance(a, TryAgain) and not a.maybe_sent for a in rest), rest
        assert "GOAWAY" in rest[0].reason  # type: ignore[union-attr]
        assert isinstance(await post(client, b"again"), H2Response)
        assert len(connections) == 2


async def test_a_refused_stream_was_not_sent_another_reset_maybe_was() -> None:
    def reset(server: Server, stream_id: int, body: bytes) -> None:
        code = h2.errors.ErrorCodes[body.decode()]
        server.h2.reset_stream(stream_id, code)

    async with serving(reset) as (client, _):
        refused = await post(client, b"REFUSED_STREAM")
        internal = await post(client, b"INTERNAL_ERROR")
    assert isinstance(refused, TryAgain) and not refused.maybe_sent
    assert isinstance(internal, TryAgain) and internal.maybe_sent
    assert "talking to Test after the request was sent" in internal.reason


async def test_a_connection_lost_after_the_request_went_is_maybe_sent() -> None:
    async with serving(lambda server, *_: server.transport.close()) as (client, _):
        lost = await post(client, b"hello")
    assert isinstance(lost, TryAgain) and lost.maybe_sent


async def test_a_request_whose_body_never_went_is_not_sent() -> None:
    # The server allows no body bytes, then closes: the request never went out whole.
    async with serving(window=0) as (client, connections):
        lost = await post(client, b"held back")
    assert isinstance(lost, TryAgain) and not lost.maybe_sent
    assert connections[0].done == []


async def test_no_server_is_not_sent() -> None:
    client = H2Client("http://127.0.0.1:9", max_streams=1, timeout=5.0, user_agent="test")
    answer = await post(client, b"x")
    assert isinstance(answer, TryAgain) and not answer.maybe_sent
    assert "cannot connect" in answer.reason


async def test_an_answer_that_never_comes_times_out_maybe_sent() -> None:
    async with serving(lambda *_: None, answer_within=0.2) as (client, connections):
        late = await post(client, b"x")
        assert isinstance(late, TryAgain) and late.maybe_sent and "timeout" in late.reason
        assert connections[0].done == [b"x"]


class ConnectProxy:
    """An HTTP CONNECT proxy: the tunnels it opened, bytes copied both ways."""

    def __init__(self, answer: bytes = b"HTTP/1.1 200 Connection established\r\n\r\n"):
        self.answer = answer
        self.tunnels: list[str] = []

    async def __call__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        target = head.split()[1].decode()
        self.tunnels.append(target)
        if not self.answer.startswith(b"HTTP/1.1 200"):
            writer.write(self.answer)
            writer.close()
            return
        host, port = target.rsplit(":", 1)
        up_reader, up_writer = await asyncio.open_connection(host, int(port))
        writer.write(self.answer)

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            while data := await src.read(65536):
                dst.write(data)
            dst.close()

        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))


@asynccontextmanager
async def proxied(monkeypatch: pytest.MonkeyPatch, proxy: ConnectProxy) -> AsyncIterator[None]:
    server = await asyncio.start_server(proxy, "127.0.0.1")
    port = server.sockets[0].getsockname()[1]
    monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{port}")
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    try:
        yield
    finally:
        server.close()


async def test_http_proxy_from_the_environment_carries_the_connection(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    proxy = ConnectProxy()
    async with serving() as (client, connections), proxied(monkeypatch, proxy):
        answers = await asyncio.gather(*(post(client, b"via proxy %d" % i) for i in range(5)))
    assert [a.content for a in answers if isinstance(a, H2Response)] == [
        b"via proxy %d" % i for i in range(5)
    ]
    assert proxy.tunnels == [client.base_url.removeprefix("http://")]
    assert len(connections) == 1


async def test_a_proxy_that_refuses_the_tunnel_is_not_sent(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    proxy = ConnectProxy(b"HTTP/1.1 403 Forbidden\r\n\r\n")
    async with serving() as (client, connections), proxied(monkeypatch, proxy):
        answer = await post(client, b"x")
    assert isinstance(answer, TryAgain) and not answer.maybe_sent
    assert "403 Forbidden" in answer.reason and connections == []


def test_answer_blocks_decode_as_hpack_decodes_them_whatever_they_do_to_its_table() -> None:
    """A block that leaves the dynamic table alone is decoded aside from ``hpack``; every
    block, in order, still reads as ``hpack.Decoder`` reads it, and leaves the same
    table for the next one."""
    rng = random.Random(7)
    encoder, ours, reference = hpack.Encoder(), _Decoder(), hpack.Decoder()
    names = ["apns-id", "content-type", "date", "x-custom", "server", "retry-after"]
    blocks = []
    for n in range(400):
        fields: list[tuple[bytes, bytes] | hpack.NeverIndexedHeaderTuple] = [
            (b":status", rng.choice([b"200", b"400", b"429", b"503"]))
        ]
        for name in rng.sample(names, rng.randint(0, 4)):
            value = rng.choice([b"application/json", b"%032x" % rng.getrandbits(128), b"x" * 300])
            if rng.random() < 0.5:
                fields.append(hpack.NeverIndexedHeaderTuple(name.encode(), value))
            else:
                fields.append((name.encode(), value))
        if n % 50 == 49:
            encoder.header_table_size = rng.choice([0, 256, 4096])
        blocks.append(encoder.encode(fields, huffman=rng.random() < 0.5))
    # Literals never indexed, as the sandboxes write them (tepat/sandbox/h2c_server.py).
    blocks.append(b"\x88\x00\x07apns-id\x24" + b"0123456789ABCDEF0123456789ABCDEF0123")
    for block in blocks:
        expected = reference.decode(block, raw=True)
        status, headers = ours.decode(block)
        assert status == int(dict(expected)[b":status"])
        assert headers == {
            bytes(k).decode(): bytes(v).decode("latin-1") for k, v in expected if k != b":status"
        }
        assert ours.hpack.header_table.dynamic_entries == reference.header_table.dynamic_entries
    with pytest.raises(hpack.exceptions.HPACKDecodingError):
        ours.decode(b"\x00\x07apns-id\x24short")  # ends inside its value
    with pytest.raises(hpack.exceptions.HPACKDecodingError):
        _Decoder().decode(b"\x80")  # index 0 names nothing
