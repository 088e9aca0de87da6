"""Unsubscribe tokens: made and read back; forged, altered, expired and malformed ones refused."""

from __future__ import annotations

import base64
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tepat.domain.errors import DomainError
from tepat.domain.unsubscribe import (
    TokenExpired,
    TokenForged,
    TokenMalformed,
    UnsubscribeClaim,
    make_token,
    read_token,
)

KEY = b"k" * 32
NOW = datetime(2027, 3, 1, 9, 0, tzinfo=UTC)
CLAIM = UnsubscribeClaim("user-42", "promotions", "email", NOW + timedelta(days=90))


def test_round_trip() -> None:
    token = make_token(KEY, CLAIM)
    assert read_token(KEY, token, NOW) == CLAIM
    assert len(token) < 100
    assert all(c.isalnum() or c in "-_." for c in token)


def test_another_key_is_forged() -> None:
    with pytest.raises(TokenForged):
        read_token(b"x" * 32, make_token(KEY, CLAIM), NOW)


def test_a_changed_payload_is_forged() -> None:
    payload, mac = make_token(KEY, CLAIM).split(".")
    raw = base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4))
    other = raw.replace(b"user-42", b"user-43")
    forged = base64.urlsafe_b64encode(other).rstrip(b"=").decode() + "." + mac
    with pytest.raises(TokenForged):
        read_token(KEY, forged, NOW)


def test_expired_at_the_instant() -> None:
    token = make_token(KEY, CLAIM)
    assert read_token(KEY, token, CLAIM.expires_at - timedelta(seconds=1)) == CLAIM
    with pytest.raises(TokenExpired) as e:
        read_token(KEY, token, CLAIM.expires_at)
    assert e.value.field == "token"


def test_an_expired_token_with_a_bad_signature_is_forged_not_expired() -> None:
    old = UnsubscribeClaim("u", "c", "email", NOW - timedelta(days=1))
    with pytest.raises(TokenForged):
        read_token(b"x" * 32, make_token(KEY, old), NOW)


@pytest.mark.parametrize(
    "token",
    ["", ".", "abc", "a.b.c", "!!!.abc", "abc.!!!", "a" * 600 + ".b", "YWJj.YWJj", "YWJj.a"],
)
def test_malformed(token: str) -> None:
    with pytest.raises(TokenMalformed):
        read_token(KEY, token, NOW)


@given(st.text(max_size=300))
def test_any_text_is_refused_as_a_domain_error(token: str) -> None:
    with pytest.raises(DomainError):
        read_token(KEY, token, NOW)


def test_fields_on_one_line() -> None:
    with pytest.raises(DomainError):
        make_token(KEY, UnsubscribeClaim("a\nb", "c", "email", NOW))
