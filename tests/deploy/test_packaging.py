"""Pins, constraints, LICENSE, Dockerfile and .dockerignore (issue 11, defects 6 and 7)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from tests.deploy.compose_file import ROOT

PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
# floors the code needs: NoDecode (pydantic-settings 2.7), schemathesis 4's API
FLOORS = {"pydantic-settings": "2.7", "schemathesis": "4"}
EXACT = ("ruff", "mypy")


def requirements() -> list[Requirement]:
    project = PYPROJECT["project"]
    names = list(project["dependencies"])
    for extra in project["optional-dependencies"].values():
        names += extra
    return [Requirement(r) for r in names]


def constraints() -> dict[str, Version]:
    pins: dict[str, Version] = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        name, sep, version = line.partition("==")
        assert sep, f"constraints.txt: {line!r} is not an exact pin"
        pins[canonicalize_name(name)] = Version(version)
    return pins


def by_name() -> dict[str, Requirement]:
    return {str(canonicalize_name(r.name)): r for r in requirements()}


def test_floors_match_what_the_code_uses() -> None:
    for name, floor in FLOORS.items():
        spec = by_name()[name].specifier
        assert f">={floor}" in str(spec).split(","), f"{name} needs >={floor}, has {spec}"


def test_linters_are_pinned_exactly() -> None:
    for name in EXACT:
        specs = list(by_name()[name].specifier)
        assert len(specs) == 1 and specs[0].operator == "==", f"{name}: {by_name()[name]}"


def test_every_requirement_is_pinned_in_constraints_within_its_range() -> None:
    pins = constraints()
    for req in requirements():
        name = canonicalize_name(req.name)
        assert name in pins, f"{req.name} is not in constraints.txt: run scripts/lock.sh"
        assert req.specifier.contains(pins[name], prereleases=True), (
            f"constraints.txt pins {req.name}=={pins[name]}, outside {req.specifier}:"
            " run scripts/lock.sh"
        )


def test_constraints_are_used_by_the_dockerfile_and_the_test_command() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert "COPY constraints.txt" in dockerfile
    assert re.search(r"pip install -c constraints\.txt \.", dockerfile)
    venv = (ROOT / "scripts/venv.sh").read_text()
    assert "-c constraints.txt" in venv
    assert "scripts/venv.sh test" in (ROOT / "scripts/test.sh").read_text()


def test_license_file_matches_pyproject() -> None:
    assert PYPROJECT["project"]["license"] == "Apache-2.0"
    text = (ROOT / "LICENSE").read_text()
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    assert "END OF TERMS AND CONDITIONS" in text


def dockerfile_instructions() -> list[tuple[str, str]]:
    text = (ROOT / "Dockerfile").read_text().replace("\\\n", " ")
    found = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            keyword, _, rest = line.partition(" ")
            found.append((keyword.upper(), rest.strip()))
    return found


def test_dockerfile_has_a_writable_data_dir_expose_and_healthcheck() -> None:
    steps = dockerfile_instructions()
    kinds = [k for k, _ in steps]
    env = " ".join(v for k, v in steps if k == "ENV")
    # the SQLite default and the admin key file beside it live in /data, owned by the user
    assert "TEPAT_DATABASE_URL=sqlite:////data/tepat.db" in env
    assert any(k == "RUN" and "chown tepat:tepat /data" in v for k, v in steps)
    assert ("VOLUME", '["/data"]') in steps
    user = [v for k, v in steps if k == "USER"]
    assert user and user[-1] not in {"root", "0", "0:0"}
    assert kinds.index("USER") > max(i for i, k in enumerate(kinds) if k == "RUN")
    exposed = {p for k, v in steps if k == "EXPOSE" for p in v.split()}
    assert {"8000", "8001", "9464"} <= exposed
    health = [v for k, v in steps if k == "HEALTHCHECK"]
    assert health and "tepat-healthcheck" in health[0]
    assert any(
        "deploy/docker/healthcheck.py /usr/local/bin/tepat-healthcheck" in v for _, v in steps
    )


def test_dockerignore_keeps_local_state_and_secrets_out() -> None:
    ignored = set((ROOT / ".dockerignore").read_text().split())
    assert {".git", ".venv", "*.db", ".tepat-admin-key", ".env"} <= ignored
    for needed in ("pyproject.toml", "README.md", "LICENSE", "constraints.txt", "deploy"):
        assert needed not in ignored
    for copied in ("tepat", "api", "scheduler", "consumers"):
        assert copied not in ignored


def test_healthcheck_script_reports_up_and_down(tmp_path: Path) -> None:
    import importlib.util
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    spec = importlib.util.spec_from_file_location("hc", ROOT / "deploy/docker/healthcheck.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200 if self.path == "/ok" else 503)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        base = f"http://127.0.0.1:{server.server_address[1]}"
        assert module.main(["hc", f"{base}/ok"]) == 0
        assert module.main(["hc", f"{base}/down"]) == 1
    finally:
        server.shutdown()
        server.server_close()
    # nothing listening: unhealthy, not a traceback
    assert module.main(["hc", f"{base}/ok"]) == 1
