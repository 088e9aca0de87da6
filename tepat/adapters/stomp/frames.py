"""The headers the adapter writes and the decoding of frames it reads."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from datetime import UTC, datetime

DLQ_PREFIX = "DLQ."
# headers the adapter puts on a nacked message's copy
H_NACKS = "tepat_nacks"
H_REASON = "tepat_reason"
H_QUEUE = "tepat_queue"
H_FIRST_ID = "tepat_first_message_id"
# when the first nack happened (Unix epoch milliseconds): the retry age counts from it
H_FIRST_FAILURE = "tepat_first_failure_ms"
MAX_REASON_CHARS = 2000


def text(body: bytes | str) -> str:
    return body.decode("utf-8", "replace") if isinstance(body, bytes) else body


def parse_map(body: bytes | str) -> dict[str, str]:
    """A ``jms-map-xml`` body (``<map><entry><string>k</string><long>v</long></entry>...``)."""
    content = text(body).strip()
    if not content:
        return {}
    try:
        root = ET.fromstring(content)
    except ET.ParseError:
        return {}
    result: dict[str, str] = {}
    for entry in root.findall("entry"):
        children = list(entry)
        if len(children) == 2 and children[0].text is not None:
            result[children[0].text] = children[1].text or ""
    return result


def origin(headers: dict[str, str]) -> str:
    """The queue a dead letter belongs to, as a STOMP destination."""
    if headers.get(H_QUEUE):
        return f"/queue/{headers[H_QUEUE]}"
    original = headers.get("original-destination", "")
    if original.startswith("/queue/"):
        return original
    return "/queue/" + headers.get("destination", "").removeprefix(f"/queue/{DLQ_PREFIX}")


def instant_header(value: str | None) -> datetime | None:
    """An epoch-milliseconds header as an aware UTC instant; None if absent or unreadable."""
    try:
        return datetime.fromtimestamp(int(value) / 1000, UTC) if value else None
    except (ValueError, OverflowError, OSError):
        return None


def instant_value(when: datetime) -> str:
    return str(round(when.timestamp() * 1000))


def int_header(value: str | None) -> int:
    try:
        return int(float(value)) if value is not None else 0
    except ValueError:
        return 0
