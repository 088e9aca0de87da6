"""Issue 20's "a message you can follow" across the split deployment: real `tepat api`,
`scheduler` and `consumers` processes on a real ActiveMQ, each exporting its spans over
OTLP (configured by the standard ``OTEL_*`` variables only) to a receiver in this test.
One message's trace holds spans of the API process (its request), of whichever process
published it (the outbox, through the STOMP ``traceparent`` header) and of the consumer
process (delivery, claim, send, the provider's answer and the receipt).

Skipped unless ``TEPAT_TEST_STOMP_URL`` names a broker (as tests/ops/test_split_metrics.py).
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from tests.ops.support import (
    categories_on_queues,
    child_env,
    free_port,
    stomp_url,
    tepat,
    wait_http,
)
from tests.support.waiting import eventually

pytestmark = pytest.mark.activemq
KEY = "ops-trace-admin-key-0123456789abcdef"
TOKEN = "ExponentPushToken[ops-trace]"
ONE_OFF = {"idempotency_key": "welcome", "category": "custom", "title": "Hi", "body": "!"}


class _Received:
    """Spans as OTLP/HTTP delivered them: (service, name, trace id, attributes)."""

    def __init__(self) -> None:
        self.spans: list[tuple[str, str, str, dict[str, str]]] = []
        self._lock = threading.Lock()

    def add(self, body: bytes) -> None:
        request = ExportTraceServiceRequest.FromString(body)
        for resource_spans in request.resource_spans:
            service = next(
                a.value.string_value
                for a in resource_spans.resource.attributes
                if a.key == "service.name"
            )
            for scope_spans in resource_spans.scope_spans:
                for s in scope_spans.spans:
                    attributes = {a.key: str(a.value).strip() for a in s.attributes}
                    with self._lock:
                        self.spans.append((service, s.name, s.trace_id.hex(), attributes))

    def of_trace(self, trace_id: str) -> list[tuple[str, str]]:
        with self._lock:
            return sorted({(service, name) for service, name, t, _ in self.spans if t == trace_id})


@contextmanager
def otlp_receiver() -> Iterator[tuple[str, _Received]]:
    received = _Received()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            if self.path == "/v1/traces":
                received.add(body)
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *_: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", received
    finally:
        server.shutdown()
        server.server_close()


async def test_one_message_is_one_trace_across_the_api_scheduler_and_consumer(
    tmp_path: Path,
) -> None:
    broker = stomp_url()
    prefix = f"trace{uuid.uuid4().hex[:8]}"
    sandbox_port, api_port = free_port(), free_port()
    scheduler_metrics, consumer_metrics = free_port(), free_port()
    sandbox_url, api = f"http://127.0.0.1:{sandbox_port}", f"http://127.0.0.1:{api_port}"
    with otlp_receiver() as (endpoint, received), ExitStack() as stack:
        env = child_env(
            {
                "TEPAT_DATABASE_URL": f"sqlite:///{tmp_path}/tepat.db",
                "TEPAT_BROKER_URL": broker,
                "TEPAT_EXPO_URL": sandbox_url,
                "TEPAT_ADMIN_API_KEY": KEY,
                "TEPAT_CATEGORIES": categories_on_queues(prefix),
                "TEPAT_RECEIPT_DELAY_SECONDS": "0",
                "TEPAT_RECEIPT_POLL_INTERVAL_SECONDS": "0.5",
                "OTEL_TRACES_EXPORTER": "otlp",
                "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint,
                "OTEL_BSP_SCHEDULE_DELAY": "100",
            }
        )
        sandbox = stack.enter_context(
            tepat(
                "sandbox",
                ["sandbox", "expo", "--port", str(sandbox_port), "--receipt-delay", "0"],
                child_env({}),
                tmp_path,
            )
        )
        await wait_http(sandbox, f"{sandbox_url}/_sandbox/stats")
        processes = {}
        for name, args in (
            ("consumers", ["consumers", "--metrics-port", str(consumer_metrics)]),
            ("scheduler", ["scheduler", "--metrics-port", str(scheduler_metrics)]),
            ("api", ["api", "--port", str(api_port)]),
        ):
            service = {**env, "OTEL_SERVICE_NAME": f"tepat-{name}"}
            processes[name] = stack.enter_context(tepat(name, args, service, tmp_path))
            # One at a time: the store's migration is not raced.
            port = {"consumers": consumer_metrics, "scheduler": scheduler_metrics}.get(name)
            probe = f"http://127.0.0.1:{port}/healthz" if port else f"{api}/readyz"
            await wait_http(processes[name], probe)

        async with httpx.AsyncClient(base_url=api, headers={"X-API-Key": KEY}) as client:
            assert (await client.put("/v1/users/ana", json={"timezone": "UTC"})).is_success
            r = await client.put("/v1/users/ana/devices/phone", json={"push_token": TOKEN})
            assert r.is_success, r.text
            r = await client.post("/v1/users/ana/notifications", json=ONE_OFF)
            assert r.status_code == 201, r.text
            message_id = r.json()["id"]

            async def delivered() -> bool:
                got = (await client.get("/v1/users/ana/messages")).json()["messages"]
                return [(m["id"], m["status"]) for m in got] == [(message_id, "delivered")]

            await eventually(delivered, timeout=60, what="the message delivered")

        for name in ("api", "scheduler", "consumers"):
            assert processes[name].stop() == 0, processes[name].stderr()[-3000:]

    [request] = [s for s in received.spans if s[1] == "POST /v1/users/{user_id}/notifications"]
    trace = received.of_trace(request[2])
    # The outbox publish is the API's (its write published what was due) or the
    # scheduler's (its publisher loop): either way in the same trace.
    assert {name for _, name in trace} >= {
        "POST /v1/users/{user_id}/notifications",
        "outbox publish",
        "deliver",
        "claim",
        "send",
        "send recorded",
        "receipt recorded",
    }, trace
    services = {service for service, _ in trace}
    assert {"tepat-api", "tepat-consumers"} <= services, trace
    assert ("tepat-consumers", "deliver") in trace and (
        "tepat-consumers",
        "receipt recorded",
    ) in trace
    [recorded] = [s for s in received.spans if s[1] == "send recorded"]
    assert message_id in recorded[3]["tepat.message_id"]
