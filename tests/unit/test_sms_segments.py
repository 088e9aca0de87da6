"""SMS encoding and segment counting (tepat/domain/sms.py)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tepat.domain.errors import DomainError
from tepat.domain.sms import (
    GSM7_BASIC,
    GSM7_EXTENSION,
    Encoding,
    check_segments,
    count_segments,
    encoding_of,
)

# The GSM 03.38 default alphabet written out independently of the module, by code point
# (0x1B, the escape, excluded): the module's table must be exactly this.
GSM_0338_BY_CODE = [
    "@", "£", "$", "¥", "è", "é", "ù", "ì", "ò", "Ç", "\n", "Ø", "ø", "\r", "Å", "å",
    "Δ", "_", "Φ", "Γ", "Λ", "Ω", "Π", "Ψ", "Σ", "Θ", "Ξ", "Æ", "æ", "ß", "É",
    " ", "!", '"', "#", "¤", "%", "&", "'", "(", ")", "*", "+", ",", "-", ".", "/",
    *"0123456789", ":", ";", "<", "=", ">", "?",
    "¡", *"ABCDEFGHIJKLMNOPQRSTUVWXYZ", "Ä", "Ö", "Ñ", "Ü", "§",
    "¿", *"abcdefghijklmnopqrstuvwxyz", "ä", "ö", "ñ", "ü", "à",
]  # fmt: skip


def test_the_basic_table_is_gsm_03_38() -> None:
    assert len(GSM_0338_BY_CODE) == 127
    assert frozenset(GSM_0338_BY_CODE) == GSM7_BASIC
    assert frozenset("\f^{}\\[~]|€") == GSM7_EXTENSION
    assert not GSM7_BASIC & GSM7_EXTENSION


@pytest.mark.parametrize(
    ("body", "encoding"),
    [
        ("Your invoice 8841 is overdue.", Encoding.GSM7),
        ("Olá! Não esqueça", Encoding.UCS2),  # ã is not GSM-7
        ("Ça coûte 5€", Encoding.UCS2),  # û is not GSM-7
        ("Ça va? 5€ {ok}", Encoding.GSM7),  # Ç, € and braces are
        ("façade", Encoding.UCS2),  # lower-case ç is not (only Ç is)
        ("Привет", Encoding.UCS2),
        ("ok 👍", Encoding.UCS2),
        ("", Encoding.GSM7),
    ],
)
def test_encoding(body: str, encoding: Encoding) -> None:
    assert encoding_of(body) is encoding


@pytest.mark.parametrize(
    ("body", "units", "segments"),
    [
        ("", 0, 0),
        ("a", 1, 1),
        ("a" * 160, 160, 1),
        ("a" * 161, 161, 2),
        ("a" * 306, 306, 2),
        ("a" * 307, 307, 3),
        ("€" * 80, 160, 1),  # extension characters count two septets
        ("€" * 81, 162, 2),
        ("a" * 159 + "[", 161, 2),
        # The escape would straddle parts 1 and 2: it moves whole into part 2, and part 3
        # is needed for the last septet (153 + 153 would have held 306 units).
        ("a" * 152 + "{" + "a" * 152, 306, 3),
        ("ж" * 70, 70, 1),
        ("ж" * 71, 71, 2),
        ("ж" * 134, 134, 2),
        ("ж" * 135, 135, 3),
        ("😀" * 35, 70, 1),  # a surrogate pair is two UTF-16 units
        ("😀" * 36, 72, 2),
        # 33 pairs fill a part to 66 of 67: 67 pairs need three parts, not two.
        ("😀" * 67, 134, 3),
        ("a" * 159 + "ç", 160, 3),  # one non-GSM character makes all 160 UCS-2
    ],
)
def test_count_segments(body: str, units: int, segments: int) -> None:
    info = count_segments(body)
    assert (info.units, info.segments) == (units, segments)


def test_check_segments_names_the_field() -> None:
    assert check_segments("a" * 459, 3, "body").segments == 3
    with pytest.raises(DomainError) as e:
        check_segments("a" * 460, 3, "content.sms")
    assert e.value.field == "content.sms"
    assert "4 SMS segments" in e.value.message and "at most 3" in e.value.message
    with pytest.raises(DomainError) as e:
        check_segments("ж" * 202, 3, "body")
    assert "UCS-2" in e.value.message
    with pytest.raises(DomainError) as e:
        check_segments("", 3, "body")
    assert e.value.field == "body"
    with pytest.raises(ValueError):
        check_segments("a", 0, "body")


def _reference_split(body: str) -> list[str]:
    """Split as a handset encoder would, written apart from the module: encode each
    character on its own and start a new part when the next would not fit."""
    gsm = all(c in GSM_0338_BY_CODE or c in "\f^{}\\[~]|€" for c in body)

    def units(c: str) -> int:
        if gsm:
            return 1 if c in GSM_0338_BY_CODE else 2
        return len(c.encode("utf-16-le")) // 2

    total = sum(units(c) for c in body)
    if total <= (160 if gsm else 70):
        return [body] if body else []
    limit = 153 if gsm else 67
    parts, part, used = [], "", 0
    for c in body:
        if used + units(c) > limit:
            parts.append(part)
            part, used = "", 0
        part += c
        used += units(c)
    parts.append(part)
    return parts


gsm_text = st.text(alphabet=st.sampled_from(sorted(GSM7_BASIC | GSM7_EXTENSION)), max_size=700)
any_text = st.text(max_size=400)


@given(st.one_of(gsm_text, any_text))
def test_segments_agree_with_a_reference_split(body: str) -> None:
    info = count_segments(body)
    assert info.segments == len(_reference_split(body))
    if info.encoding is Encoding.UCS2:
        assert info.units == len(body.encode("utf-16-le")) // 2
    single, part = (160, 153) if info.encoding is Encoding.GSM7 else (70, 67)
    assert (info.segments <= 1) == (info.units <= single)
    if info.segments > 1:
        # Never fewer than the units need, at most one unit lost per part to a whole character.
        assert math.ceil(info.units / part) <= info.segments <= math.ceil(info.units / (part - 1))


@given(gsm_text)
def test_gsm_bodies_stay_gsm(body: str) -> None:
    info = count_segments(body)
    assert info.encoding is Encoding.GSM7
    assert info.units == len(body) + sum(c in GSM7_EXTENSION for c in body)
