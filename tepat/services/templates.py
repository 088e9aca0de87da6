"""Template use cases: save a version, read, list, preview, and pin for sending.

:meth:`TemplateService.resolve` picks the version for the recipient's locale (``pt-BR``
-> ``pt`` -> ``TEPAT_DEFAULT_LOCALE``) and the message carries its id, so a retry after
the template was edited renders the same text. Versions are immutable, so compiled ones
are cached by id. Renders and compiles run on a small pool of worker threads: a template
at its limits costs a worker up to a second, while the API keeps answering.
"""

from __future__ import annotations

import asyncio
import functools
from collections import OrderedDict
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

from tepat.clock import Clock
from tepat.domain.errors import DomainError
from tepat.domain.locales import canonical_locale, fallback_chain
from tepat.domain.routing import Channel, EventTypes, parse_channel
from tepat.domain.templates import (
    CompiledTemplate,
    Rendered,
    Template,
    TemplateKey,
    check_parts,
    compile_parts,
    content_hash,
    parse_template_id,
    render,
)
from tepat.ports.repositories.templates import TemplateRepository
from tepat.services.accounts import NotFound

COMPILED_CACHE_SIZE = 512
# Few: a render is CPU work, and a flood of slow previews should queue, not take every core.
RENDER_THREADS = 2

T = TypeVar("T")
_workers = ThreadPoolExecutor(max_workers=RENDER_THREADS, thread_name_prefix="tepat-render")


async def _off_loop(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(_workers, functools.partial(fn, *args, **kwargs))


@dataclass(frozen=True, slots=True)
class Pinned:
    """The version a message will render: ``template_id`` names it for good."""

    template_id: str
    locale: str  # the locale actually used (after fallback)
    version: int


@dataclass(frozen=True, slots=True)
class Preview:
    rendered: Rendered
    locale: str
    template: Template | None  # None for an inline template
    variables: tuple[str, ...]


class TemplateService:
    def __init__(
        self,
        store: TemplateRepository,
        event_types: EventTypes,
        clock: Clock,
        default_locale: str = "en",
        cache_size: int = COMPILED_CACHE_SIZE,
    ) -> None:
        self._store = store
        self._event_types = event_types
        self._clock = clock
        self.default_locale = canonical_locale(default_locale, "default_locale")
        self._compiled: OrderedDict[str, CompiledTemplate] = OrderedDict()
        self._cache_size = cache_size

    def key(self, event_type: str, channel: str, locale: str) -> TemplateKey:
        """A key for a configured event type and a channel it routes to."""
        key = TemplateKey.parse(event_type, channel, locale)
        routed = self._event_types.get(key.event_type, "type")
        if key.channel not in routed.channels:
            routes = ", ".join(c.value for c in routed.channels)
            raise DomainError(
                "channel",
                f"{key.event_type!r} does not route to {key.channel.value!r} (its channels:"
                f" {routes}; see TEPAT_EVENT_TYPES)",
            )
        return key

    async def put(self, key: TemplateKey, parts: Mapping[str, Any]) -> tuple[Template, bool]:
        """A new version unless ``parts`` equal the latest's: (template, created)."""
        checked = await _off_loop(check_parts, key.channel, parts)
        return await self._store.add_template_version(
            key, checked, content_hash(checked), self._clock.now()
        )

    async def get(self, key: TemplateKey, version: int | None = None) -> Template:
        template = await self._store.get_template(key, version)
        if template is None:
            what = f"{key.event_type}/{key.channel.value}/{key.locale}"
            raise NotFound("template", what if version is None else f"{what} version {version}")
        return template

    async def list(self, event_type: str | None = None) -> list[Template]:
        return await self._store.latest_templates(event_type)

    def variables(self, template: Template) -> tuple[str, ...]:
        return self._compile(template).variables

    async def resolve(
        self, event_type: str, channel: Channel | str, user_locale: str | None
    ) -> Pinned | None:
        """The latest version for the first locale of the fallback chain that has one."""
        ch = parse_channel(channel, "channel")
        for locale in fallback_chain(user_locale, self.default_locale):
            template = await self._store.get_template(TemplateKey(event_type, ch, locale))
            if template is not None:
                return Pinned(template.id, locale, template.version)
        return None

    async def render_pinned(self, template_id: str, data: Mapping[str, Any]) -> Rendered:
        """Render the version ``template_id`` names (TemplateError: ``render_error``)."""
        compiled = self._compiled.get(template_id)
        if compiled is None:
            key, version = parse_template_id(template_id)
            compiled = self._compile(await self.get(key, version))
        else:
            self._compiled.move_to_end(template_id)
        return await _off_loop(render, compiled, data)

    async def preview_stored(
        self,
        event_type: str,
        channel: str,
        locale: str,
        data: Mapping[str, Any],
        version: int | None = None,
    ) -> Preview:
        """Render what a user of ``locale`` would get: the fallback chain, or exactly
        ``version`` at ``locale`` when given."""
        key = self.key(event_type, channel, locale)
        if version is not None:
            template = await self.get(key, version)
        else:
            pinned = await self.resolve(key.event_type, key.channel, key.locale)
            if pinned is None:
                tried = ", ".join(fallback_chain(key.locale, self.default_locale))
                raise NotFound(
                    "template", f"{key.event_type}/{key.channel.value} in any of {tried}"
                )
            template = await self.get(TemplateKey(key.event_type, key.channel, pinned.locale))
        compiled = self._compile(template)
        rendered = await _off_loop(render, compiled, data)
        return Preview(rendered, template.key.locale, template, compiled.variables)

    async def preview_inline(
        self,
        event_type: str,
        channel: str,
        locale: str,
        parts: Mapping[str, Any],
        data: Mapping[str, Any],
    ) -> Preview:
        key = self.key(event_type, channel, locale)
        return await _off_loop(_preview_inline, key, parts, data)

    def _compile(self, template: Template) -> CompiledTemplate:
        compiled = self._compiled.get(template.id)
        if compiled is None:
            compiled = compile_parts(template.key.channel, template.parts)
            self._compiled[template.id] = compiled
            if len(self._compiled) > self._cache_size:
                self._compiled.popitem(last=False)
        return compiled


def _preview_inline(key: TemplateKey, parts: Mapping[str, Any], data: Mapping[str, Any]) -> Preview:
    checked = check_parts(key.channel, parts, prefix="template.")
    compiled = compile_parts(key.channel, checked, prefix="template.")
    rendered = render(compiled, data, prefix="template.")
    return Preview(rendered, key.locale, None, compiled.variables)
