"""The message-list cursor both store adapters share: it round-trips a position to the
microsecond, and anything else is the client's error naming the ``cursor`` field."""

from __future__ import annotations

import base64
from datetime import UTC, datetime, timedelta, timezone

import pytest

from tepat.adapters.message_cursor import decode_cursor, encode_cursor
from tepat.domain.errors import DomainError


def test_a_cursor_names_its_position_to_the_microsecond_in_utc() -> None:
    at = datetime(2027, 3, 1, 9, 0, 0, 123456, tzinfo=timezone(timedelta(hours=7)))
    cursor = encode_cursor(at, "m|1")  # the id may hold the separator
    assert "=" not in cursor and "|" not in cursor
    decoded_at, message_id = decode_cursor(cursor)
    assert (decoded_at, message_id) == (at, "m|1")
    assert decoded_at.tzinfo is UTC


@pytest.mark.parametrize(
    "cursor",
    [
        "!!!",
        "",
        base64.urlsafe_b64encode(b"no separator").decode(),
        base64.urlsafe_b64encode(b"not an instant|m1").decode(),
        base64.urlsafe_b64encode(b"2027-03-01T09:00:00|m1").decode(),  # no zone
        base64.urlsafe_b64encode(b"\xff\xfe|m1").decode(),
    ],
)
def test_a_cursor_this_service_did_not_return_names_the_field(cursor: str) -> None:
    with pytest.raises(DomainError) as e:
        decode_cursor(cursor)
    assert e.value.field == "cursor"
