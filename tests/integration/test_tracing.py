"""Issue 20's "a message you can follow": one trace from the HTTP request that made a
message, through the store, the outbox and the broker's headers, to the consumer, the
provider's answer and the receipt; its log lines name the same trace."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from pydantic import SecretStr
from structlog.testing import capture_logs

from api.app import create_app
from tepat import tracing
from tepat.domain.models import MessageStatus
from tests.support.pipeline import Pipeline, pipeline
from tests.support.waiting import eventually

START = datetime(2027, 3, 1, 8, 0, tzinfo=UTC)
ADMIN_KEY = "test-admin-key-0123456789abcdef"


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    tracing.start([exporter], batch=False)
    try:
        yield exporter
    finally:
        tracing.stop()


async def _one_off_to_receipt(p: Pipeline) -> str:
    """A one-off made through the HTTP API, sent to the Expo sandbox, its receipt polled;
    returns its message id."""
    await p.add_user("ana")
    transport = httpx.ASGITransport(app=create_app(p.rt, ADMIN_KEY))
    async with httpx.AsyncClient(transport=transport, base_url="http://tepat.test") as client:
        response = await client.post(
            "/v1/users/ana/notifications",
            headers={"X-API-Key": ADMIN_KEY},
            json={"idempotency_key": "welcome", "category": "custom", "title": "Hi", "body": "!"},
        )
    assert response.status_code == 201, response.text
    message_id: str = response.json()["id"]
    await eventually(lambda: p.sent_with_tickets(message_id), what="sent, its ticket stored")
    p.clock.advance(timedelta(minutes=16))
    await p.rt.receipts.poll_all()
    assert await p.status_of(message_id) is MessageStatus.DELIVERED
    return message_id


def _trace(span: ReadableSpan) -> str:
    assert span.context is not None
    return f"{span.context.trace_id:032x}"


async def test_one_message_is_one_trace_from_request_to_receipt(
    tmp_path: Path, spans: InMemorySpanExporter
) -> None:
    async with pipeline(tmp_path, start=START, admin_api_key=SecretStr(ADMIN_KEY)) as p:
        with capture_logs() as logs:
            message_id = await _one_off_to_receipt(p)
        stored = await p.rt.store.get_message(message_id)
    assert stored is not None and stored.trace_parent is not None
    trace_id = tracing.trace_id_of(stored.trace_parent)

    by_name = {s.name: s for s in spans.get_finished_spans()}
    request = by_name["POST /v1/users/{user_id}/notifications"]
    assert _trace(request) == trace_id  # the request's span is the message's trace
    path = ["outbox publish", "deliver", "claim", "send", "send recorded", "receipt recorded"]
    assert {name: _trace(by_name[name]) for name in path} == dict.fromkeys(path, trace_id)
    # The broker hop: the consumer's span is the child of the publisher's, by the
    # traceparent the broker message carried in its headers.
    deliver, publish = by_name["deliver"], by_name["outbox publish"]
    assert deliver.parent is not None and publish.context is not None
    assert deliver.parent.span_id == publish.context.span_id and deliver.parent.is_remote
    sent = by_name["send recorded"].attributes or {}
    assert sent["tepat.message_id"] == message_id and sent["tepat.outcome"] == "sent"
    assert (by_name["receipt recorded"].attributes or {})["tepat.receipt"] == "ok"

    # The log lines about the message name its trace.
    lines = [e for e in logs if e.get("message_id") == message_id]
    assert [e["event"] for e in lines] == ["send recorded", "receipt recorded"]
    assert {e["trace_id"] for e in lines} == {trace_id}


async def test_off_by_default_no_trace_is_stored_or_logged(tmp_path: Path) -> None:
    assert not tracing.enabled()
    async with pipeline(tmp_path, start=START, admin_api_key=SecretStr(ADMIN_KEY)) as p:
        with capture_logs() as logs:
            message_id = await _one_off_to_receipt(p)
        stored = await p.rt.store.get_message(message_id)
    assert stored is not None and stored.trace_parent is None
    assert not any("trace_id" in e for e in logs)


async def test_a_request_span_keeps_no_credential_of_its_url(
    tmp_path: Path, spans: InMemorySpanExporter
) -> None:
    async with pipeline(tmp_path, start=START, admin_api_key=SecretStr(ADMIN_KEY)) as p:
        transport = httpx.ASGITransport(app=create_app(p.rt, ADMIN_KEY))
        async with httpx.AsyncClient(transport=transport, base_url="http://tepat.test") as client:
            await client.get("/v1/users/ana/messages?access_token=s3cret&limit=1")
            await client.get("/u/unsubscribe-token-s3cret")
    attributes = [str(s.attributes) for s in spans.get_finished_spans()]
    assert len(attributes) == 2 and "REDACTED" in attributes[0]
    assert not [a for a in attributes if "s3cret" in a]
