"""The generated references (docs/hooks/reference.py) cover the code whole.

The configuration page lists every field of ``Settings`` with its variable, default and
description, so no setting goes undocumented; the HTTP API pages have a section for
every operation of the app's OpenAPI document, and a schema section for every link.
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tepat.config import ENV_PREFIX, Settings

ROOT = Path(__file__).resolve().parents[2]
HOOK = ROOT / "docs/hooks/reference.py"


def load_hook() -> ModuleType:
    spec = importlib.util.spec_from_file_location("docs_reference_hook", HOOK)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def hook() -> ModuleType:
    return load_hook()


@pytest.fixture(scope="module")
def openapi(hook: ModuleType) -> dict[str, Any]:
    doc: dict[str, Any] = hook.openapi_document()
    return doc


def sections(page: str) -> dict[str, str]:
    """The configuration page's text under each ``## `TEPAT_…``` heading."""
    parts = re.split(r"^## `(TEPAT_\w+)`$", page, flags=re.M)
    return dict(zip(parts[1::2], parts[2::2], strict=True))


def test_every_setting_is_on_the_configuration_page(hook: ModuleType) -> None:
    documented = sections(hook.configuration_markdown())
    expected = {f"{ENV_PREFIX}{name.upper()}": f for name, f in Settings.model_fields.items()}
    assert set(documented) == set(expected)
    for env, field in expected.items():
        assert field.description, f"{env} has no description (its docstring in tepat/config.py)"
        assert " ".join(field.description.split()) in documented[env]


def test_a_setting_without_a_description_fails_the_build(
    hook: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    field = Settings.model_fields["database_url"]
    monkeypatch.setattr(field, "description", None)
    with pytest.raises(ValueError, match="database_url"):
        hook.configuration_markdown()


def test_types_and_defaults_are_the_code_s(hook: ModuleType) -> None:
    documented = sections(hook.configuration_markdown())
    assert "string; default `sqlite:///./tepat.db`." in documented["TEPAT_DATABASE_URL"]
    assert "integer, ≥ 1 and ≤ 64; default `6`." in documented["TEPAT_EXPO_MAX_CONNECTIONS"]
    assert "secret; default unset." in documented["TEPAT_JWT_SECRET"]
    assert "true or false; default `false`." in documented["TEPAT_WEBHOOK_ALLOW_HTTP"]


def test_every_operation_has_a_section(hook: ModuleType, openapi: dict[str, Any]) -> None:
    pages: dict[str, str] = hook.api_pages(openapi)
    text = "\n".join(pages.values())
    operations = [
        f"## `{method.upper()} {path}`"
        for path, ops in openapi["paths"].items()
        for method in ops
        if method in hook.METHODS
    ]
    assert len(operations) > 40
    for heading in operations:
        assert text.count(heading + "\n") == 1, heading
    # the routes a newcomer looks for first are there
    assert "## `POST /v1/users/{user_id}/notifications`" in text
    assert "## `POST /v1/events`" in text


def test_every_schema_link_has_its_section(hook: ModuleType, openapi: dict[str, Any]) -> None:
    pages: dict[str, str] = hook.api_pages(openapi)
    anchors = set(re.findall(r"\{#(schema-[\w-]+)\}", pages[hook.SCHEMAS_PAGE]))
    linked = {a for page in pages.values() for a in re.findall(r"schemas\.md#([\w-]+)", page)}
    assert linked, "no operation links a schema"
    assert linked <= anchors, sorted(linked - anchors)
    assert set(openapi["components"]["schemas"]) == {
        name for name in openapi["components"]["schemas"] if hook._anchor(name) in anchors
    }


def test_the_nav_lists_every_api_page(hook: ModuleType) -> None:
    nav: list[Any] = [{"Reference": [{"HTTP API": hook.API_INDEX}]}]
    pages = [{"Overview": hook.API_INDEX}, f"{hook.API_DIR}/users.md", hook.SCHEMAS_PAGE]
    assert hook._expand(nav, pages)
    assert nav == [{"Reference": [{"HTTP API": pages}]}]
    assert not hook._expand([{"Home": "index.md"}], pages)
