"""MkDocs hook: the configuration and HTTP API references, generated at build time.

Nothing here is kept by hand, so the pages cannot drift from the code:

- ``reference/configuration.md`` from :class:`tepat.config.Settings` (each field's
  environment variable, type, default, bounds and description: its docstring);
- ``reference/api/*.md`` from the OpenAPI document of the app ``api.app.create_app``
  builds, one page per tag and one for the schemas, listed under "HTTP API" in the nav.

The build is offline: the app is created over a runtime on a throwaway SQLite file and
the embedded broker, and only its ``openapi()`` is read.
"""

from __future__ import annotations

import asyncio
import re
import tempfile
from typing import Any

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files

CONFIGURATION_PAGE = "reference/configuration.md"
API_DIR = "reference/api"
API_INDEX = f"{API_DIR}/index.md"
SCHEMAS_PAGE = f"{API_DIR}/schemas.md"
METHODS = ("get", "put", "post", "patch", "delete")


# --- configuration --------------------------------------------------------------------


def configuration_markdown() -> str:
    """The settings reference: one row per field of ``Settings``, in the model's order."""
    from tepat.config import ENV_PREFIX, Settings

    missing = [name for name, f in Settings.model_fields.items() if not f.description]
    if missing:
        # Every setting is documented, or the build (and tests/docs) fails naming it.
        raise ValueError(f"Settings fields without a description: {', '.join(missing)}")
    sections = []
    for name, field in Settings.model_fields.items():
        kind = _annotation_text(field.annotation)
        bounds = _bounds_text(field.metadata)
        if bounds:
            kind = f"{kind}, {bounds}"
        description = " ".join((field.description or "").split())
        sections += [
            f"## `{ENV_PREFIX}{name.upper()}`",
            "",
            f"{kind}; default {_default_text(field)}.",
            "",
            description,
            "",
        ]
    return "\n".join(
        [
            "# Configuration",
            "",
            "All settings are `TEPAT_*` environment variables; a bad value stops the process",
            "with one line naming the variable. This page is generated from the settings",
            "model (`tepat/config.py`, `Settings`, each field's docstring) when the site is",
            "built, so it lists every setting there is, with the default the code has.",
            "Tracing is configured by OpenTelemetry's standard `OTEL_*` variables instead",
            "([Operations](../guides/operations.md#by-its-trace)).",
            "",
            *sections,
        ]
    )


def _annotation_text(annotation: Any) -> str:
    text = repr(annotation) if not isinstance(annotation, type) else annotation.__name__
    text = re.sub(r"typing\.|pydantic\.types\.|tepat\.[\w.]+\.", "", text)
    text = re.sub(r"Annotated\[(.*), NoDecode\]", r"\1", text)
    text = text.replace("NoneType", "None").replace("Optional[", "").replace("Literal", "one of ")
    if text.startswith("dict") or "CategorySetting" in text:
        return "JSON object"
    text = text.replace(" | None", "")
    names = {"str": "string", "SecretStr": "secret", "float": "number", "int": "integer"}
    return names.get(text, "true or false" if text == "bool" else text)


def _bounds_text(metadata: list[Any]) -> str:
    signs = {"ge": "≥", "gt": ">", "le": "≤", "lt": "<"}
    parts = []
    for item in metadata:
        for attr, sign in signs.items():
            value = getattr(item, attr, None)
            if value is not None:
                parts.append(f"{sign} {value}")
    return " and ".join(parts)


def _default_text(field: Any) -> str:
    if field.default_factory is not None:
        value = field.default_factory()
        return f"`{value!r}`" if value else "unset"
    value = field.default
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return f"`{value}`"


# --- HTTP API -------------------------------------------------------------------------


def openapi_document() -> dict[str, Any]:
    """The app's OpenAPI document, built as the tests build the app (tests/api/conftest.py)."""
    return asyncio.run(_openapi_document())


async def _openapi_document() -> dict[str, Any]:
    from pydantic import SecretStr

    from api.app import create_app
    from tepat.config import Settings
    from tepat.runtime import open_runtime

    admin_key = "docs-build-only-" + "0" * 32
    with tempfile.TemporaryDirectory(prefix="tepat-docs-") as tmp:
        settings = Settings(
            database_url=f"sqlite:///{tmp}/docs.db",
            broker_url="embedded://",
            admin_api_key=SecretStr(admin_key),
        )
        async with open_runtime(settings) as rt:
            return create_app(rt, admin_key).openapi()


def api_pages(doc: dict[str, Any]) -> dict[str, str]:
    """Markdown pages by path under the docs dir: an index, one per tag, the schemas."""
    by_tag: dict[str, list[tuple[str, str, dict[str, Any]]]] = {}
    for path, operations in doc.get("paths", {}).items():
        for method in METHODS:
            if method in operations:
                op = operations[method]
                tag = (op.get("tags") or ["other"])[0]
                by_tag.setdefault(tag, []).append((method, path, op))
    pages: dict[str, str] = {}
    index = [
        "# HTTP API",
        "",
        f"{doc['info'].get('description', '')}".strip(),
        "",
        "Generated from the app's OpenAPI document (`api/app.py`, `create_app`) when the",
        "site is built; a running server serves the same document at `/openapi.json`",
        "(interactive at `/docs` with `TEPAT_API_DOCS=true`).",
        "",
        "| group | operations |",
        "|---|---|",
    ]
    for tag in sorted(by_tag):
        ops = by_tag[tag]
        index.append(f"| [{tag.capitalize()}]({_slug(tag)}.md) | {len(ops)} |")
        pages[f"{API_DIR}/{_slug(tag)}.md"] = _tag_page(tag, ops)
    index += ["", "Request and response bodies: [schemas](schemas.md).", ""]
    pages[API_INDEX] = "\n".join(index)
    pages[SCHEMAS_PAGE] = _schemas_page(doc.get("components", {}).get("schemas", {}))
    return pages


def _tag_page(tag: str, ops: list[tuple[str, str, dict[str, Any]]]) -> str:
    out = [f"# {tag.capitalize()}", ""]
    for method, path, op in ops:
        out += [f"## `{method.upper()} {path}`", ""]
        if op.get("summary"):
            out += [f"**{op['summary']}**", ""]
        if op.get("description"):
            out += [op["description"].strip(), ""]
        params = op.get("parameters", [])
        if params:
            out += ["| parameter | in | type | required | description |", "|---|---|---|---|---|"]
            for p in params:
                schema = p.get("schema", {})
                about = p.get("description") or schema.get("description", "")
                out.append(
                    f"| `{p['name']}` | {p.get('in', '')} | {_cell(_type(schema))} "
                    f"| {'yes' if p.get('required') else 'no'} | {_cell(about)} |"
                )
            out.append("")
        body = op.get("requestBody")
        if body:
            kinds = [
                f"`{ctype}`: {_type(media.get('schema', {}))}"
                for ctype, media in body.get("content", {}).items()
            ]
            required = " (required)" if body.get("required") else ""
            out += [f"Request body{required}: " + "; ".join(kinds), ""]
        out += ["| status | description | body |", "|---|---|---|"]
        for status, response in sorted(op.get("responses", {}).items()):
            bodies = "; ".join(
                f"`{ctype}` {_type(media.get('schema', {}))}".strip()
                for ctype, media in response.get("content", {}).items()
            )
            out.append(f"| {status} | {_cell(response.get('description', ''))} | {_cell(bodies)} |")
        out.append("")
    return "\n".join(out)


def _schemas_page(schemas: dict[str, Any]) -> str:
    out = ["# Schemas", "", "The bodies the [HTTP API](index.md) takes and answers.", ""]
    for name in sorted(schemas, key=str.lower):
        schema = schemas[name]
        out += [f"## {name} {{#{_anchor(name)}}}", ""]
        if schema.get("description"):
            out += [schema["description"].strip(), ""]
        props = schema.get("properties", {})
        if props:
            required = set(schema.get("required", []))
            out += ["| field | type | required | description |", "|---|---|---|---|"]
            for prop, sub in props.items():
                out.append(
                    f"| `{prop}` | {_cell(_type(sub))} | {'yes' if prop in required else 'no'} "
                    f"| {_cell(sub.get('description', ''))} |"
                )
            out.append("")
        elif schema.get("enum"):
            out += ["One of " + ", ".join(f"`{v}`" for v in schema["enum"]) + ".", ""]
        else:
            out += [f"Type: {_type(schema)}.", ""]
    return "\n".join(out)


def _type(schema: dict[str, Any]) -> str:
    """A schema in a few words, a reference as a link to its section of the schemas page."""
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[-1]
        return f"[{name}](schemas.md#{_anchor(name)})"
    for key in ("anyOf", "oneOf", "allOf"):
        if key in schema:
            return " or ".join(_type(s) for s in schema[key])
    if "enum" in schema:
        return "one of " + ", ".join(f"`{v}`" for v in schema["enum"])
    if "const" in schema:
        return f"`{schema['const']}`"
    kind = schema.get("type", "any")
    if kind == "array":
        return f"array of {_type(schema.get('items', {}))}"
    if kind == "object" and "additionalProperties" in schema:
        extra = schema["additionalProperties"]
        return f"object of {_type(extra)}" if isinstance(extra, dict) else "object"
    if "format" in schema:
        return f"{kind} ({schema['format']})"
    return str(kind)


def _anchor(name: str) -> str:
    return "schema-" + re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")


def _slug(tag: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", tag.lower()).strip("-")


def _cell(text: str) -> str:
    """Text that stays inside one Markdown table cell."""
    return " ".join(str(text).split()).replace("|", "\\|")


# --- MkDocs events --------------------------------------------------------------------

_pages: dict[str, str] = {}


def generated_pages() -> dict[str, str]:
    """Every generated page by its path under the docs dir (tests/docs reads this too)."""
    return {CONFIGURATION_PAGE: configuration_markdown(), **api_pages(openapi_document())}


def on_config(config: MkDocsConfig) -> MkDocsConfig:
    """Generate the pages, and list the API's under the nav entry that names its index."""
    _pages.clear()
    _pages.update(generated_pages())
    others = (uri for uri in _pages if uri.startswith(f"{API_DIR}/") and uri != API_INDEX)
    api = [{"Overview": API_INDEX}, *sorted(others, key=lambda uri: (uri == SCHEMAS_PAGE, uri))]
    if not _expand(config.nav or [], api):
        raise ValueError(f"mkdocs.yml's nav must name {API_INDEX}")
    return config


def _expand(nav: list[Any], api: list[Any]) -> bool:
    """Replace the nav entry ``{title: API_INDEX}`` by ``{title: [every API page]}``."""
    for entry in nav:
        if isinstance(entry, dict):
            for title, target in entry.items():
                if target == API_INDEX:
                    entry[title] = api
                    return True
                if isinstance(target, list) and _expand(target, api):
                    return True
    return False


def on_files(files: Files, config: MkDocsConfig) -> Files:
    for src_uri, content in _pages.items():
        files.append(File.generated(config, src_uri, content=content))
    return files
