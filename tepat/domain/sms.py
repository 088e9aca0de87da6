"""SMS bodies: which encoding a body needs and how many segments it is billed as.

A body that fits the GSM 03.38 default alphabet (7-bit) goes as GSM-7: 160 septets in a
single message, 153 per part of a concatenated one (the user data header takes 7). The
characters of the extension table (``{ } [ ] ~ \\ | ^ €`` and form feed) are sent as an
escape plus the character: two septets each. Any other character makes the whole body
UCS-2: 70 UTF-16 code units single, 67 per part, and a character outside the Basic
Multilingual Plane (most emoji) is a surrogate pair, two units.

A part never splits an escape sequence or a surrogate pair (a handset could not decode
the halves), so a part may hold one unit less than its limit; that is what carriers and
Twilio's own counter do. Pure: no I/O.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from tepat.domain.errors import DomainError

# GSM 03.38 default alphabet, in code order (0x1B, the escape, left out: it is not a
# character a body can hold).
GSM7_BASIC = frozenset(
    "@£$¥èéùìòÇ\nØø\rÅå"
    "Δ_ΦΓΛΩΠΨΣΘΞ" + "ÆæßÉ"
    " !\"#¤%&'()*+,-./"
    "0123456789:;<=>?"
    "¡ABCDEFGHIJKLMNO"
    "PQRSTUVWXYZÄÖÑÜ§"
    "¿abcdefghijklmno"
    "pqrstuvwxyzäöñüà"
)
# The extension table: escape + character, two septets.
GSM7_EXTENSION = frozenset("\f^{}\\[~]|€")

GSM7_SINGLE = 160
GSM7_PART = 153
UCS2_SINGLE = 70
UCS2_PART = 67


class Encoding(enum.StrEnum):
    GSM7 = "GSM-7"
    UCS2 = "UCS-2"


@dataclass(frozen=True, slots=True)
class Segments:
    """How a body goes out: its encoding, its length in that encoding's units (septets
    for GSM-7, UTF-16 code units for UCS-2) and the number of segments billed."""

    encoding: Encoding
    units: int
    segments: int


def encoding_of(body: str) -> Encoding:
    """GSM-7 when every character is in its basic or extension table, else UCS-2."""
    gsm7 = all(c in GSM7_BASIC or c in GSM7_EXTENSION for c in body)
    return Encoding.GSM7 if gsm7 else Encoding.UCS2


def _widths(body: str, encoding: Encoding) -> list[int]:
    """Each character's width in units; a width-2 character is never split."""
    if encoding is Encoding.GSM7:
        return [2 if c in GSM7_EXTENSION else 1 for c in body]
    return [2 if ord(c) > 0xFFFF else 1 for c in body]


def count_segments(body: str) -> Segments:
    """The encoding, length and segment count of ``body`` (an empty body: 0 segments)."""
    encoding = encoding_of(body)
    widths = _widths(body, encoding)
    units = sum(widths)
    gsm7 = encoding is Encoding.GSM7
    if units <= (GSM7_SINGLE if gsm7 else UCS2_SINGLE):
        return Segments(encoding, units, 1 if units else 0)
    part = GSM7_PART if gsm7 else UCS2_PART
    segments, used = 1, 0
    for width in widths:
        if used + width > part:
            segments += 1
            used = 0
        used += width
    return Segments(encoding, units, segments)


def check_segments(body: str, max_segments: int, field: str) -> Segments:
    """``body``'s segments, or :class:`DomainError` naming ``field`` when it is empty or
    needs more than ``max_segments``."""
    if max_segments < 1:
        raise ValueError(f"max_segments must be at least 1, got {max_segments!r}")
    info = count_segments(body)
    if info.segments == 0:
        raise DomainError(field, "an SMS needs a body")
    if info.segments > max_segments:
        gsm7 = info.encoding is Encoding.GSM7
        why = "" if gsm7 else "; a character outside GSM-7 makes the body UCS-2"
        raise DomainError(
            field,
            f"{info.segments} SMS segments ({info.units} {info.encoding} units), at most"
            f" {max_segments} allowed ({GSM7_SINGLE if gsm7 else UCS2_SINGLE} units fit"
            f" one segment{why})",
        )
    return info
