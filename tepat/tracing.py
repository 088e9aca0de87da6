"""Tracing: one trace per message, from the request or plan run that made it to its receipt.

Off unless ``OTEL_TRACES_EXPORTER`` names an exporter (``otlp``, ``console``; several
comma-separated), as OpenTelemetry's own SDK configuration reads it; ``OTEL_SDK_DISABLED=true``
turns it off again. Everything else is the SDK's standard variables:
``OTEL_EXPORTER_OTLP_ENDPOINT`` / ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` (OTLP over
HTTP/protobuf), ``OTEL_SERVICE_NAME`` (default ``tepat``), ``OTEL_RESOURCE_ATTRIBUTES``.
Off, every function here returns at its first line: no span, no stored context.

A message's trace crosses three boundaries, each carrying the W3C ``traceparent``:

1. the store: a message is written with the context of the span it was made in (the API
   request's span, a plan run's), in its ``trace_parent`` field;
2. the broker: the outbox publishes a batch inside a span that continues its first
   message's trace and links the others', and puts that span's ``traceparent`` in the
   broker message's headers; the consumer's ``deliver`` span continues it;
3. each message's own events (``send recorded``, ``receipt recorded``,
   :mod:`tepat.services.sending.message_log`) are spans in the message's own trace,
   linked to the batch span they happened in; so a batch mixing messages of several
   requests still leaves each message one trace from its request to its receipt.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from opentelemetry import trace
from opentelemetry.trace import Link, NonRecordingSpan, Span, SpanContext
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from tepat.domain.errors import ConfigError

if TYPE_CHECKING:
    # The SDK is imported when tracing starts: off, a process does not pay for it.
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SpanExporter

HEADER = "traceparent"
_W3C = TraceContextTextMapPropagator()

_provider: TracerProvider | None = None  # None: tracing is off
_tracer: trace.Tracer | None = None


def enabled() -> bool:
    return _tracer is not None


def configure_from_environment() -> None:
    """Start tracing if the ``OTEL_*`` variables ask for it (see the module's docstring)."""
    names = [n.strip() for n in os.environ.get("OTEL_TRACES_EXPORTER", "").split(",")]
    names = [n for n in names if n and n != "none"]
    disabled = os.environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true"
    if _provider is None and names and not disabled:
        start([_exporter(name) for name in names])


def _exporter(name: str) -> SpanExporter:
    if name == "console":
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter

        return ConsoleSpanExporter()
    if name == "otlp":
        protocol = os.environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or os.environ.get(
            "OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"
        )
        if protocol != "http/protobuf":
            raise ConfigError(
                f"tepat: bad configuration: OTEL_EXPORTER_OTLP_PROTOCOL: {protocol!r}:"
                " Tepat exports http/protobuf"
            )
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        return OTLPSpanExporter()
    raise ConfigError(
        f"tepat: bad configuration: OTEL_TRACES_EXPORTER: {name!r}: Tepat knows otlp, console"
        " and none"
    )


def start(exporters: Sequence[SpanExporter], batch: bool = True) -> None:
    """Trace from now on, to ``exporters`` (a test passes an in-memory one, ``batch=False``
    so each span is there once it ends)."""
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor

    global _provider, _tracer
    stop()
    resource = Resource.create({"service.name": os.environ.get("OTEL_SERVICE_NAME", "tepat")})
    provider = TracerProvider(resource=resource)
    for exporter in exporters:
        processor = BatchSpanProcessor(exporter) if batch else SimpleSpanProcessor(exporter)
        provider.add_span_processor(processor)
    _provider, _tracer = provider, provider.get_tracer("tepat")


def stop() -> None:
    """Export what is left and trace no more."""
    global _provider, _tracer
    if _provider is not None:
        _provider.shutdown()
    _provider = _tracer = None


# Where a request's URL lands in a server span's attributes (old and new conventions).
_URL_ATTRIBUTES = ("http.url", "http.target", "url.full", "url.query", "url.path")


def instrument_app(app: Any, redact: Callable[[str], str]) -> None:
    """A server span per request to the FastAPI ``app`` (when tracing is on): the span
    a message made by the request is stamped with. ``redact`` cleans its URL as the
    access log's is (a stream's ``?access_token=``, an unsubscribe link's token)."""
    if _provider is None:
        return
    from opentelemetry.instrumentation.fastapi import FastAPIInstrumentor

    def clean_url(span: Span, _: dict[str, Any]) -> None:
        attributes = getattr(span, "attributes", None) or {}
        for name in _URL_ATTRIBUTES:
            if isinstance(value := attributes.get(name), str):
                span.set_attribute(name, redact(value))

    FastAPIInstrumentor.instrument_app(
        app,
        server_request_hook=clean_url,
        tracer_provider=_provider,
        # Probes and scrapes would be traces of their own every few seconds.
        excluded_urls="healthz,readyz,metrics",
        # one span per request, not one more per ASGI message
        exclude_spans=["receive", "send"],
    )


def current_traceparent() -> str | None:
    """The W3C ``traceparent`` of the span in progress; None when there is none."""
    if _tracer is None:
        return None
    carrier: dict[str, str] = {}
    _W3C.inject(carrier)
    return carrier.get(HEADER)


def headers() -> dict[str, str]:
    """The broker headers that carry the span in progress to the consumer."""
    traceparent = current_traceparent()
    return {HEADER: traceparent} if traceparent else {}


def trace_id_of(traceparent: str | None) -> str | None:
    """The trace id (32 hex digits) ``traceparent`` names; None when it names none."""
    context = _context(traceparent)
    return None if context is None else f"{context.trace_id:032x}"


def _context(traceparent: str | None) -> SpanContext | None:
    extracted = _W3C.extract({HEADER: traceparent} if traceparent else {})
    context = trace.get_current_span(extracted).get_span_context()
    return context if context.is_valid else None


@contextmanager
def span(
    name: str, parent: str | None = None, links: Sequence[str] = (), **attributes: Any
) -> Iterator[None]:
    """A span for the duration of the block: a child of ``parent`` (a ``traceparent``)
    if it names one, else of the span in progress; linked to the traces of ``links``."""
    if _tracer is None:
        yield
        return
    remote = _context(parent)
    context = None if remote is None else trace.set_span_in_context(NonRecordingSpan(remote))
    linked = [Link(c) for c in map(_context, links) if c is not None]
    with _tracer.start_as_current_span(
        name, context=context, links=linked, attributes=_attributes(attributes)
    ):
        yield


def message_event(name: str, traceparent: str | None, **attributes: Any) -> None:
    """One event of one message (a send recorded, a receipt) as a span in the message's
    own trace, linked to the span in progress (the batch or poll it happened in)."""
    remote = _context(traceparent)
    if _tracer is None or remote is None:
        return
    current = trace.get_current_span().get_span_context()
    _tracer.start_span(
        name,
        context=trace.set_span_in_context(NonRecordingSpan(remote)),
        links=[Link(current)] if current.is_valid and current.trace_id != remote.trace_id else [],
        attributes=_attributes(attributes),
    ).end()


def _attributes(attributes: dict[str, Any]) -> dict[str, Any]:
    """``tepat.``-prefixed, without the Nones (OpenTelemetry refuses them)."""
    return {
        f"tepat.{name}": value if isinstance(value, str | int | float | bool) else str(value)
        for name, value in attributes.items()
        if value is not None
    }
