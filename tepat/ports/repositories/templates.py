"""Message templates, every version kept."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any, Protocol

from tepat.domain.templates import Template, TemplateKey


class TemplateRepository(Protocol):
    """Message templates (``tepat/domain/templates.py``): every version kept forever,
    never edited in place; unique on (event type, channel, locale, version)."""

    async def add_template_version(
        self, key: TemplateKey, parts: Mapping[str, Any], content_hash: str, now: datetime
    ) -> tuple[Template, bool]:
        """Append version latest + 1 and return it with ``True``, unless the latest has
        ``content_hash``: then it, with ``False`` (a retried PUT). Concurrent calls get
        distinct versions; identical concurrent calls create one."""

    async def get_template(self, key: TemplateKey, version: int | None = None) -> Template | None:
        """That version, or the latest when ``version`` is None."""

    async def latest_templates(self, event_type: str | None = None) -> list[Template]:
        """The latest version of every key (of one event type when given), by
        (event type, channel, locale)."""
