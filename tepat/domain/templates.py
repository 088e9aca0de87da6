"""Message templates: per (event type, channel, locale), versioned, rendered in a sandbox.

A template holds one Jinja2 source per *part* of its channel (:data:`CHANNEL_PARTS`),
compiled when saved (a syntax error is refused then, with its line) in the sandbox of
``tepat/domain/template_sandbox.py``, with :class:`~jinja2.StrictUndefined`: a variable
missing from the data fails the render instead of printing a blank. Sources come from
admin-key holders and data from events, so sizes are bounded at save and at render.

Stored versions are immutable; :func:`template_id` names one (``order.paid:push:en:3``),
which a message pins so a retry renders the same text.
"""

from __future__ import annotations

import enum
import functools
import hashlib
import json
import re
import time
import traceback
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final

import jinja2
from jinja2 import TemplateSyntaxError, meta, nodes
from jinja2.exceptions import UndefinedError

from tepat.domain.errors import DomainError
from tepat.domain.inbox import check_link
from tepat.domain.locales import canonical_locale
from tepat.domain.routing import Channel, check_event_type_name, parse_channel
from tepat.domain.sms import check_segments
from tepat.domain.template_sandbox import (
    LOOP_GUARD,
    MAX_NESTING,
    RENDER_SECONDS,
    Sandbox,
    budget,
    environment,
    guard_loops,
    nesting,
    uses_reserved_name,
)

MAX_SOURCE_BYTES: Final = 16 * 1024
MAX_PART_CHARS: Final = 8 * 1024
MAX_DATA_KEYS: Final = 32
PUSH_MAX_BYTES: Final = 3584  # = accounts.MAX_PAYLOAD_BYTES: Expo's 4096 less headroom
INBOX_LIMITS: Final[Mapping[str, int]] = {
    "title": 200,
    "body": 4000,
    "html": 32 * 1024,
    "link": 2048,
}  # characters
EMAIL_LIMITS: Final[Mapping[str, int]] = {
    "title": 998,  # the subject: RFC 5322's longest line
    "body": 256 * 1024,
    "html": 512 * 1024,
}  # characters
SMS_BODY_CHARS: Final = 1600  # Twilio's longest body
#: The most segments a rendered SMS may take (TEPAT_SMS_MAX_SEGMENTS, enforced by the
#: SMS adapter when sending, may be lower).
SMS_MAX_SEGMENTS: Final = 10
_DATA_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]{0,63}$")
_UNDEFINED_NAME = re.compile(r"^'([^']+)' is undefined$")


class TemplateFailure(enum.StrEnum):
    """Why a template was refused or failed; ``render_error`` is also the
    ``status_reason`` of a message whose render fails."""

    COMPILE_ERROR = "compile_error"
    TOO_LARGE = "too_large"
    INVALID = "invalid"
    RENDER_ERROR = "render_error"


class TemplateError(DomainError):
    """A template problem naming the field (``body``, ``data.order``), its reason and the
    missing ``variable`` when a render failed on one."""

    def __init__(
        self,
        field: str,
        message: str,
        reason: TemplateFailure,
        *,
        variable: str | None = None,
    ) -> None:
        super().__init__(field, message)
        self.reason = reason
        self.variable = variable


_compile_error = functools.partial(TemplateError, reason=TemplateFailure.COMPILE_ERROR)
_invalid = functools.partial(TemplateError, reason=TemplateFailure.INVALID)
_too_large = functools.partial(TemplateError, reason=TemplateFailure.TOO_LARGE)
_render_error = functools.partial(TemplateError, reason=TemplateFailure.RENDER_ERROR)


@dataclass(frozen=True, slots=True)
class PartSpec:
    name: str
    required: bool
    html: bool = False  # rendered with autoescape
    mapping: bool = False  # an object of string templates


CHANNEL_PARTS: Final[Mapping[Channel, tuple[PartSpec, ...]]] = {
    Channel.PUSH: (
        PartSpec("title", True),
        PartSpec("body", True),
        PartSpec("data", False, mapping=True),
    ),
    Channel.INBOX: (
        PartSpec("title", True),
        PartSpec("body", True),
        PartSpec("html", False, html=True),
        PartSpec("link", False),
    ),
    # title is the subject, body the text part, html the HTML part
    Channel.EMAIL: (
        PartSpec("title", True),
        PartSpec("body", True),
        PartSpec("html", False, html=True),
    ),
    Channel.SMS: (PartSpec("body", True),),
}


@dataclass(frozen=True, slots=True)
class TemplateKey:
    event_type: str
    channel: Channel
    locale: str

    @classmethod
    def parse(cls, event_type: object, channel: object, locale: object) -> TemplateKey:
        return cls(
            check_event_type_name(event_type, "type"),
            parse_channel(channel, "channel"),
            canonical_locale(locale, "locale"),
        )


def template_id(key: TemplateKey, version: int) -> str:
    return f"{key.event_type}:{key.channel.value}:{key.locale}:{version}"


def parse_template_id(value: str, field: str = "template_id") -> tuple[TemplateKey, int]:
    """The key and version a :func:`template_id` names."""
    parts = value.split(":")
    if len(parts) != 4 or not parts[3].isdigit():
        raise DomainError(field, f"expected TYPE:CHANNEL:LOCALE:VERSION, got {value!r}")
    return TemplateKey.parse(*parts[:3]), int(parts[3])


@dataclass(frozen=True, slots=True)
class Template:
    """One stored version; never changed once written."""

    key: TemplateKey
    version: int
    parts: Mapping[str, Any]
    content_hash: str
    created_at: datetime

    @property
    def id(self) -> str:
        return template_id(self.key, self.version)


def content_hash(parts: Mapping[str, Any]) -> str:
    """Equal for equal sources, whatever the key order: an identical PUT is a no-op."""
    canonical = json.dumps(parts, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()


_TEXT = environment(autoescape=False)
_HTML = environment(autoescape=True)


@dataclass(frozen=True, slots=True)
class CompiledTemplate:
    """A channel's parts, compiled once: render many times (see :func:`compile_parts`)."""

    channel: Channel
    parts: Mapping[str, jinja2.Template]
    data: Mapping[str, jinja2.Template] = field(default_factory=dict)
    variables: tuple[str, ...] = ()


def check_parts(channel: Channel, parts: object, prefix: str = "") -> dict[str, Any]:
    """The parts as stored (optional ones left out or null are absent), checked for
    ``channel``: shape, sizes, and that each compiles; errors name ``prefix + part``."""
    specs = {s.name: s for s in CHANNEL_PARTS[channel]}
    if not isinstance(parts, Mapping):
        raise _invalid(prefix.rstrip(".") or "body", "expected an object")
    if unknown := [name for name in parts if name not in specs]:
        parts_of = f"not a part of a {channel.value} template (parts: {', '.join(specs)})"
        raise _invalid(f"{prefix}{unknown[0]}", parts_of)
    out: dict[str, Any] = {}
    for spec in specs.values():
        value = parts.get(spec.name)
        where = f"{prefix}{spec.name}"
        if value is None:
            if spec.required:
                raise _invalid(where, "required")
            continue
        if spec.mapping:
            out[spec.name] = _check_mapping(value, where)
        else:
            out[spec.name] = _check_source(value, where)
    size = len(json.dumps(out, ensure_ascii=False).encode())
    if size > MAX_SOURCE_BYTES:
        raise _too_large(
            prefix.rstrip(".") or "body",
            f"template too large: {size} bytes of source (at most {MAX_SOURCE_BYTES})",
        )
    compile_parts(channel, out, prefix)  # syntax errors, with their line
    return out


def _check_source(value: object, where: str) -> str:
    if not isinstance(value, str):
        raise _invalid(where, "expected a string (a Jinja2 template)")
    if len(value) > MAX_PART_CHARS:
        raise _too_large(
            where,
            f"template too large: {len(value)} characters (at most {MAX_PART_CHARS} per part)",
        )
    try:
        value.encode()
    except UnicodeEncodeError:
        raise _invalid(where, "must be valid Unicode text") from None
    return value


def _check_mapping(value: object, where: str) -> dict[str, str]:
    if not isinstance(value, Mapping):
        raise _invalid(where, "expected an object of string templates")
    if len(value) > MAX_DATA_KEYS:
        raise _too_large(where, f"at most {MAX_DATA_KEYS} keys")
    out = {}
    for key, source in value.items():
        if not isinstance(key, str) or not _DATA_KEY.fullmatch(key):
            rule = "keys are 1-64 letters, digits and _.- starting with a letter or _"
            raise _invalid(f"{where}.{key}", rule)
        out[key] = _check_source(source, f"{where}.{key}")
    return out


def compile_parts(channel: Channel, parts: Mapping[str, Any], prefix: str = "") -> CompiledTemplate:
    specs = {s.name: s for s in CHANNEL_PARTS[channel]}
    compiled: dict[str, jinja2.Template] = {}
    data: dict[str, jinja2.Template] = {}
    variables: set[str] = set()
    for name, value in parts.items():
        spec = specs[name]
        env = _HTML if spec.html else _TEXT
        if spec.mapping:
            for key, source in value.items():
                data[key] = _compile(env, source, f"{prefix}{name}.{key}", variables)
        else:
            compiled[name] = _compile(env, value, f"{prefix}{name}", variables)
    return CompiledTemplate(channel, compiled, data, tuple(sorted(variables)))


def _compile(env: Sandbox, source: str, where: str, variables: set[str]) -> jinja2.Template:
    try:
        ast: nodes.Template = env.parse(source)
        if nesting(ast) > MAX_NESTING:
            raise _compile_error(
                where,
                f"does not compile: nested over {MAX_NESTING} levels deep (a long chain of"
                " attributes, filters or operators?)",
            )
        if uses_reserved_name(ast):
            raise _invalid(where, f"{LOOP_GUARD} is a reserved name")
        variables |= meta.find_undeclared_variables(ast)
        guard_loops(ast)  # each iteration takes a step of the render's budget
        return env.from_string(ast)
    except TemplateError:
        raise
    except TemplateSyntaxError as e:
        raise _compile_error(where, f"does not compile: line {e.lineno}: {e.message}") from None
    except Exception as e:  # a pathological source can exhaust the parser: a 422, not a 500
        raise _compile_error(where, f"does not compile: {type(e).__name__}") from None


@dataclass(frozen=True, slots=True)
class Rendered:
    """A rendered message: the parts of its channel, as the channel adapter sends them."""

    channel: Channel
    title: str
    body: str
    data: Mapping[str, str] = field(default_factory=dict)  # push
    html: str | None = None  # inbox
    link: str | None = None  # inbox

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"title": self.title, "body": self.body}
        if self.channel is Channel.PUSH:
            out["data"] = dict(self.data)
        else:
            if self.html is not None:
                out["html"] = self.html
            if self.link is not None:
                out["link"] = self.link
        return out


def render(
    compiled: CompiledTemplate,
    data: Mapping[str, Any],
    *,
    prefix: str = "",
    data_field: str = "data",
    seconds: float = RENDER_SECONDS,
) -> Rendered:
    """Render with ``data`` within ``seconds``; any failure is a :class:`TemplateError`
    with reason ``render_error`` (a missing variable names ``data_field.<variable>``)."""
    context = dict(data)
    deadline = time.monotonic() + seconds

    def one(template: jinja2.Template, part: str, limit: int) -> str:
        where, size = f"{prefix}{part}", 0
        chunks: list[str] = []
        try:
            with budget(deadline, seconds):
                # Streamed, so an oversized or slow render stops at the limit, unfinished.
                for chunk in template.generate(context):
                    size += len(chunk)
                    if size > limit:
                        raise _render_error(
                            where, f"rendered text over the limit of {limit} characters"
                        )
                    if time.monotonic() > deadline:
                        took = f"rendering took over {seconds:g} s: templates must stay small"
                        raise _render_error(where, took)
                    chunks.append(chunk)
                text = "".join(chunks)
                text.encode()  # a lone surrogate from the data cannot be stored or sent
                return text
        except TemplateError:
            raise
        except UndefinedError as e:
            line = _template_line(e)
            if m := _UNDEFINED_NAME.match(str(e)):
                name = m.group(1)
                missing = f"missing variable {name!r}, used by {where}{line}"
                raise _render_error(f"{data_field}.{name}", missing, variable=name) from None
            raise _render_error(data_field, f"{e} (in {where}{line})") from None
        except Exception as e:  # template code can raise anything (RecursionError, MemoryError)
            failed = f"render failed{_template_line(e)}: {type(e).__name__}: {e}"
            raise _render_error(where, failed[:500]) from None

    parts = {
        name: one(t, name, _limit(compiled.channel, name)) for name, t in compiled.parts.items()
    }
    values = {key: one(t, f"data.{key}", PUSH_MAX_BYTES) for key, t in compiled.data.items()}
    rendered = Rendered(
        compiled.channel,
        title=parts.get("title", ""),
        body=parts["body"],
        data=values,
        html=parts.get("html"),
        link=parts.get("link"),
    )
    _check_rendered(rendered, prefix)
    return rendered


def _limit(channel: Channel, part: str) -> int:
    if channel is Channel.PUSH:
        return PUSH_MAX_BYTES
    if channel is Channel.EMAIL:
        return EMAIL_LIMITS[part]
    if channel is Channel.SMS:
        return SMS_BODY_CHARS
    return INBOX_LIMITS[part]


def _template_line(exc: BaseException) -> str:
    """`` at line N`` of the template, from Jinja's rewritten traceback."""
    for frame in reversed(traceback.extract_tb(exc.__traceback__)):
        if frame.filename == "<template>" and frame.lineno:
            return f" at line {frame.lineno}"
    return ""


def _check_rendered(r: Rendered, prefix: str) -> None:
    if r.channel is Channel.SMS:
        try:
            check_segments(r.body, SMS_MAX_SEGMENTS, f"{prefix}body")
        except DomainError as e:
            raise _render_error(e.field, e.message) from None
        return
    if r.channel is Channel.PUSH:
        size = len(
            json.dumps(
                {"title": r.title, "body": r.body, "data": dict(r.data)}, ensure_ascii=False
            ).encode("utf-8", "surrogatepass")
        )
        if size > PUSH_MAX_BYTES:
            raise _render_error(
                f"{prefix}body",
                f"rendered notification too large: {size} bytes (at most {PUSH_MAX_BYTES})",
            )
        return
    if r.link is not None:
        try:
            check_link(r.link)
        except DomainError:
            raise _render_error(
                f"{prefix}link",
                "rendered link must be a URL or a path starting with '/',"
                f" got {r.link.strip()[:100]!r}",
            ) from None
