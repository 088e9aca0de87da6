"""The one unpadded base64url codec (tepat/domain/b64url.py)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tepat.domain.b64url import b64url, unb64url


@given(st.binary(max_size=64))
def test_round_trip_without_padding(data: bytes) -> None:
    text = b64url(data)
    assert "=" not in text
    assert unb64url(text) == data


@pytest.mark.parametrize("text", ["ab+/", "ab/c", "a b", "ab==", "é", "abc\n", "a"])
def test_anything_outside_the_alphabet_or_a_bad_length_is_refused(text: str) -> None:
    with pytest.raises(ValueError):
        unb64url(text)
