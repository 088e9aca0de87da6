"""`tepat --version` reads the installed package's metadata."""

from __future__ import annotations

from importlib.metadata import version
from pathlib import Path

from tests.ops_cli.support import env, tepat


def test_version_is_the_package_version(tmp_path: Path) -> None:
    done = tepat("--version", environ=env(), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"tepat {version('tepat')}\n"
