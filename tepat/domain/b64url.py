"""Unpadded base64url (RFC 4648 §5 without the ``=``): page cursors, unsubscribe tokens and
Web Push keys all travel in URLs or JSON as it."""

from __future__ import annotations

import base64
import re

_ALPHABET = re.compile(r"[A-Za-z0-9_-]*")


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def unb64url(text: str) -> bytes:
    """The bytes ``text`` encodes; ``ValueError`` for any character outside the alphabet
    (the standard decoders skip some, and take ``+`` and ``/`` beside ``-`` and ``_``)."""
    if not _ALPHABET.fullmatch(text):
        raise ValueError("not base64url")
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
