"""Locale tags and the fallback chain templates are looked up along.

A tag is a BCP 47 subset: language (2-3 letters), optional script (4 letters),
optional region (2 letters or 3 digits): ``en``, ``pt-BR``, ``zh-Hant-TW``, ``es-419``.
Tags are stored in their canonical case (``pt-BR``); ``pt_br`` is read as ``pt-BR``.
"""

from __future__ import annotations

import re

from tepat.domain.errors import DomainError

_TAG = re.compile(
    r"^(?P<lang>[A-Za-z]{2,3})(?:[-_](?P<script>[A-Za-z]{4}))?(?:[-_](?P<region>[A-Za-z]{2}|[0-9]{3}))?$"
)


def canonical_locale(value: object, field: str = "locale") -> str:
    """The tag in canonical case, or :class:`DomainError` naming ``field``."""
    m = _TAG.fullmatch(value) if isinstance(value, str) else None
    if m is None:
        raise DomainError(
            field,
            "expected a locale tag: language, optional script and region"
            f" ('en', 'pt-BR', 'zh-Hant-TW'), got {value!r}",
        )
    parts = [m["lang"].lower()]
    if m["script"]:
        parts.append(m["script"].title())
    if m["region"]:
        parts.append(m["region"].upper())
    return "-".join(parts)


def fallback_chain(locale: str | None, default: str) -> list[str]:
    """Where to look, most specific first: ``pt-BR`` -> ``pt`` -> the default. A locale
    with extensions (``en-US-u-ca-gregory``) is cut to its leading subtags we read."""
    chain: list[str] = []
    subtags = (locale or "").replace("_", "-").split("-")
    for n in range(min(len(subtags), 3), 0, -1):
        try:
            tag = canonical_locale("-".join(subtags[:n]))
        except DomainError:
            continue
        if tag not in chain:
            chain.append(tag)
    if default not in chain:
        chain.append(default)
    return chain
