"""The FCM and APNs sandboxes' own server (tepat/sandbox/h2c_server.py) against a client
of the ``h2`` library: its HPACK decoder, the frames a client may send (SETTINGS, PING,
CONTINUATION, WINDOW_UPDATE, RST_STREAM, GOAWAY), flow control both ways, the routes it
answers itself beside the app's, and HTTP/1.1 on the same port."""

from __future__ import annotations

import asyncio
import random
import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from datetime import datetime, timedelta
from typing import Any

import h2.config
import h2.connection
import h2.events
import h2.settings
import hpack
import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from tepat.clock import FakeClock
from tepat.sandbox.h2c_server import (
    Answer,
    H2cServer,
    H2Error,
    HeaderDecoder,
    HotRequest,
    HotRoute,
    _Connection,
)
from tepat.sandbox.runner import running_h2c_app


def test_the_decoder_reads_what_hpack_encodes_whatever_came_before() -> None:
    rng = random.Random(7)
    encoder, decoder = hpack.Encoder(), HeaderDecoder()
    names = [b":path", b"apns-id", b"authorization", b"x-custom", b"content-type"]
    for n in range(400):
        headers = [
            (rng.choice(names), bytes(rng.randrange(32, 127) for _ in range(rng.randrange(60))))
            for _ in range(rng.randrange(1, 6))
        ]
        if n % 3 == 0:
            headers.append((b"authorization", b"the same every time"))
        if n % 50 == 0:  # the client shrinks then restores its table
            encoder.header_table_size = rng.choice((0, 256, 4096))
        block = encoder.encode(headers, huffman=n % 2 == 0)
        assert decoder.decode(block) == headers


def test_a_remembered_block_is_forgotten_once_the_table_changes() -> None:
    encoder, decoder = hpack.Encoder(), HeaderDecoder()
    decoder.decode(encoder.encode([(b"x-a", b"one")]))  # now index 62
    indexed = bytes((0x80 | 62,))
    assert decoder.decode(indexed) == decoder.decode(indexed) == [(b"x-a", b"one")]
    decoder.decode(encoder.encode([(b"x-b", b"two")]))  # 62 is this one now
    assert decoder.decode(indexed) == [(b"x-b", b"two")]


def test_bad_huffman_and_indexes_are_compression_errors() -> None:
    with pytest.raises(H2Error):
        # a literal whose name's Huffman code ends inside a symbol, not on EOS padding
        HeaderDecoder().decode(b"\x00\x81\x00\x00")
    with pytest.raises(H2Error):
        HeaderDecoder().decode(bytes((0x80 | 70,)))  # no such entry


# ---- the server ----

hung_up = threading.Event()  # the stalled route saw its client go


async def hot_or_cold(request: Request) -> Response:
    return Response(b"from the app", headers={"x-by": "app"})


def take(request: HotRequest, body: bytes) -> Answer | None:
    if request.path_params["name"] == "cold":
        return None
    name = request.path_params["name"].encode()
    return Answer.of(Response(name + b":" + body, headers={"x-by": "hot"}))


async def big(request: Request) -> Response:
    return Response(bytes(range(256)) * int(request.query_params["k"]) * 4)


async def echo(request: Request) -> Response:
    return Response(await request.body(), headers={"x-header": request.headers["x-big"][:5]})


async def stall(request: Request) -> Response:
    await request.body()
    while (await request.receive())["type"] != "http.disconnect":
        pass
    hung_up.set()
    return Response(b"too late")


def app() -> Starlette:
    hot = Route("/hot/{name}", hot_or_cold, methods=["POST"])
    served = Starlette(
        routes=[
            hot,
            Route("/big", big),
            Route("/echo", echo, methods=["POST"]),
            Route("/stall", stall, methods=["POST"]),
        ]
    )
    served.state.hot_routes = (HotRoute(hot, take),)
    return served


@contextmanager
def served() -> Iterator[str]:
    with running_h2c_app(app(), "test") as url:
        yield url


class Client:
    """An HTTP/2 client of the ``h2`` library, frame by frame."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        config = h2.config.H2Configuration(client_side=True, header_encoding="utf-8")
        self.h2 = h2.connection.H2Connection(config)
        self.events: list[Any] = []

    async def flush(self) -> None:
        self.writer.write(self.h2.data_to_send())
        await self.writer.drain()

    async def read(self) -> None:
        data = await asyncio.wait_for(self.reader.read(65536), 10)
        if not data:
            raise ConnectionError("closed")
        for event in self.h2.receive_data(data):
            if isinstance(event, h2.events.DataReceived):
                self.h2.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
            self.events.append(event)
        await self.flush()

    async def until(self, kind: type, stream_id: int | None = None) -> Any:
        while True:
            for event in self.events:
                if isinstance(event, kind) and stream_id in (
                    None,
                    getattr(event, "stream_id", None),
                ):
                    self.events.remove(event)
                    return event
            await self.read()

    async def send(
        self, method: str, path: str, body: bytes = b"", headers: tuple[tuple[str, str], ...] = ()
    ) -> int:
        stream_id = self.h2.get_next_available_stream_id()
        request = [(":method", method), (":scheme", "http"), (":authority", "t"), (":path", path)]
        self.h2.send_headers(stream_id, [*request, *headers], end_stream=not body)
        await self.flush()
        while body:  # as much as the server's windows take, then wait for them to open
            size = min(self.h2.local_flow_control_window(stream_id), len(body), 16384)
            if size:
                self.h2.send_data(stream_id, body[:size], end_stream=size == len(body))
                body = body[size:]
                await self.flush()
            else:
                await self.read()
        return stream_id

    async def answer(self, stream_id: int) -> tuple[int, dict[str, str], bytes]:
        response = await self.until(h2.events.ResponseReceived, stream_id)
        body = b""
        while True:
            for event in list(self.events):
                if getattr(event, "stream_id", None) != stream_id:
                    continue
                self.events.remove(event)
                if isinstance(event, h2.events.DataReceived):
                    body += event.data
                if isinstance(event, h2.events.StreamEnded):
                    headers = dict(response.headers)
                    return int(headers.pop(":status")), headers, body
            await self.read()

    async def request(self, method: str, path: str, body: bytes = b"") -> tuple[int, bytes]:
        status, _, content = await self.answer(await self.send(method, path, body))
        return status, content


@asynccontextmanager
async def connected(url: str, window: int | None = None) -> AsyncIterator[Client]:
    host, port = url.removeprefix("http://").split(":")
    client = Client(*await asyncio.open_connection(host, int(port)))
    client.h2.initiate_connection()
    if window is not None:
        client.h2.update_settings({h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: window})
    await client.flush()
    try:
        yield client
    finally:
        client.writer.close()


async def test_hot_routes_are_answered_without_the_app_and_the_rest_by_it() -> None:
    with served() as url:
        async with connected(url) as client:
            streams = [await client.send("POST", f"/hot/n{i}", b"body") for i in range(30)]
            for i, stream_id in enumerate(streams):
                assert await client.answer(stream_id) == (
                    200,
                    {"content-length": str(len(f"n{i}:body")), "x-by": "hot"},
                    f"n{i}:body".encode(),
                )
            cold = await client.answer(await client.send("POST", "/hot/cold", b"x"))
            assert cold[0] == 200 and cold[1]["x-by"] == "app"
            assert await client.request("GET", "/nowhere") == (404, b"Not Found")
            assert (await client.request("GET", "/hot/n1"))[0] == 405


async def test_settings_are_acknowledged_and_pings_answered() -> None:
    with served() as url:
        async with connected(url) as client:
            await client.until(h2.events.SettingsAcknowledged)
            assert client.h2.remote_settings.max_concurrent_streams == 100
            client.h2.ping(b"12345678")
            await client.flush()
            assert (await client.until(h2.events.PingAckReceived)).ping_data == b"12345678"


async def test_an_answer_larger_than_the_clients_window_goes_as_it_opens() -> None:
    with served() as url:
        async with connected(url, window=1000) as client:
            status, body = await client.request("GET", "/big?k=100")
            assert status == 200 and body == bytes(range(256)) * 400


async def test_a_body_larger_than_the_servers_windows_is_topped_up() -> None:
    with served() as url:
        async with connected(url) as client:
            body = random.Random(1).randbytes(3 * 2**20)
            stream_id = await client.send("POST", "/echo", body, (("x-big", "hello"),))
            status, headers, echoed = await client.answer(stream_id)
            assert status == 200 and echoed == body and headers["x-header"] == "hello"


async def test_a_header_block_in_continuation_frames() -> None:
    with served() as url:
        async with connected(url) as client:
            big_header = "v" * 40_000  # over 16 KiB: HEADERS and CONTINUATION frames
            stream_id = await client.send("POST", "/echo", b"x", (("x-big", big_header),))
            assert await client.answer(stream_id) == (
                200,
                {"content-length": "1", "x-header": "vvvvv"},
                b"x",
            )


async def test_a_reset_stream_is_a_client_that_hung_up() -> None:
    hung_up.clear()
    with served() as url:
        async with connected(url) as client:
            stream_id = await client.send("POST", "/stall", b"x")
            client.h2.reset_stream(stream_id)
            await client.flush()
            assert await client.request("POST", "/hot/after", b"y") == (200, b"after:y")
            assert await asyncio.to_thread(hung_up.wait, 10)


async def test_a_client_that_says_goaway_is_answered_then_closed() -> None:
    with served() as url:
        async with connected(url) as client:
            stream_id = await client.send("POST", "/hot/last", b"z")
            # by hand: the h2 library's own GOAWAY closes it to the answer
            client.writer.write(b"\x00\x00\x08\x07\x00\x00\x00\x00\x00" + bytes(8))
            assert (await client.answer(stream_id))[2] == b"last:z"
            with pytest.raises(ConnectionError):
                while True:
                    await client.read()


async def test_a_connection_error_is_goaway() -> None:
    with served() as url:
        async with connected(url) as client:
            client.writer.write(b"\x00\x00\x00\x05\x00\x00\x00\x00\x00")  # PUSH_PROMISE
            event = await client.until(h2.events.ConnectionTerminated)
            assert event.error_code == h2.errors.ErrorCodes.PROTOCOL_ERROR


def test_http1_is_served_on_the_same_port() -> None:
    with served() as url, httpx.Client(base_url=url) as client:
        assert client.post("/echo", content=b"one", headers={"x-big": "plain"}).content == (b"one")
        assert client.post("/hot/n", content=b"two").content == b"from the app"


class TickingClock(FakeClock):
    """Moves on 1 ms at every reading: a stamp taken after the read would show it."""

    def now(self) -> datetime:
        self.advance(0.001)
        return super().now()


class SinkTransport(asyncio.Transport):
    def __init__(self) -> None:
        super().__init__()
        self.written = bytearray()

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return ("127.0.0.1", 4321)

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.written += data

    def is_closing(self) -> bool:
        return False


async def test_the_requests_of_one_read_share_the_stamp_of_that_read() -> None:
    clock = TickingClock()
    stamps: list[datetime] = []

    def stamped(request: HotRequest, body: bytes) -> Answer:
        stamps.append(request.at)
        clock.now()  # the sandbox's own work on this request takes time
        return Answer(204, (), b"")

    route = Route("/stamp", hot_or_cold, methods=["POST"])
    stamping = Starlette(routes=[route])
    stamping.state.hot_routes = (HotRoute(route, stamped),)
    stamping.state.clock = clock
    connection = _Connection(H2cServer(stamping))
    connection.connection_made(SinkTransport())
    client = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    client.initiate_connection()

    def requests(count: int) -> bytes:
        for _ in range(count):
            request = [(":method", "POST"), (":scheme", "http"), (":authority", "t")]
            stream_id = client.get_next_available_stream_id()
            client.send_headers(stream_id, [*request, (":path", "/stamp")], end_stream=True)
        return client.data_to_send()

    before = clock.now()
    connection.data_received(requests(3))
    connection.data_received(requests(2))
    assert len(stamps) == 5
    assert before < stamps[0] == stamps[1] == stamps[2] < stamps[3] == stamps[4]
    # the second read comes after the work on the first one's 3 requests (3 ms), then 1 ms
    assert stamps[3] - stamps[2] == timedelta(milliseconds=4)
