"""scripts/venv.sh, which both README commands start with, on a machine like a fresh Debian.

Each test runs the real script in a copy of the repository's layout holding a tiny
package, so that a real ``python -m venv`` and ``pip install -e`` run in seconds.
Debian's missing python3-venv is reproduced the way it shows: no ``ensurepip``.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.deploy.compose_file import ROOT

pytestmark = pytest.mark.slow

PYPROJECT = """\
[build-system]
requires = ["setuptools>=61"]
build-backend = "setuptools.build_meta"

[project]
name = "venv-probe"
version = "0"

[tool.setuptools]
py-modules = ["venv_probe"]
"""


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    (repo / "scripts").mkdir(parents=True)
    shutil.copy(ROOT / "scripts/venv.sh", repo / "scripts/venv.sh")
    (repo / "pyproject.toml").write_text(PYPROJECT)
    (repo / "venv_probe.py").write_text("READY = True\n")
    (repo / "constraints.txt").write_text("# nothing pinned\n")
    return repo


def venv_sh(
    repo: Path, pythonpath: Path | None = None, python: Path | None = None
) -> subprocess.CompletedProcess[str]:
    env = {"PATH": "/usr/bin:/bin", "PYTHON": str(python or sys.executable)}
    if pythonpath is not None:
        env["PYTHONPATH"] = str(pythonpath)
    return subprocess.run(
        ["bash", str(repo / "scripts/venv.sh")],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def installed(repo: Path) -> bool:
    probe = [str(repo / ".venv/bin/python"), "-c", "import venv_probe; print(venv_probe.READY)"]
    done = subprocess.run(probe, capture_output=True, text=True, timeout=60, check=False)
    return done.stdout.strip() == "True"


def test_without_python3_venv_it_says_so_in_one_line_and_leaves_nothing(
    repo: Path, tmp_path: Path
) -> None:
    # Debian's python3 without python3-venv has no ensurepip at all
    shadow = tmp_path / "shadow"
    (shadow / "ensurepip").mkdir(parents=True)
    (shadow / "ensurepip/__init__.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'ensurepip'\")\n"
    )
    done = venv_sh(repo, pythonpath=shadow)
    assert done.returncode != 0
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "install python3-venv" in lines[0]
    assert not (repo / ".venv").exists()


def test_a_venv_that_fails_half_way_is_removed_with_one_line(repo: Path, tmp_path: Path) -> None:
    # what Debian's `python3 -m venv` does when pip cannot be bootstrapped: a .venv
    # without pip is left behind, a page of advice is printed, the exit status is 1
    fake = tmp_path / "python3"
    fake.write_text(
        f"""#!/usr/bin/env bash
if [[ "$1 $2" == "-m venv" ]]; then
  {sys.executable} -m venv --without-pip "$3"
  printf 'The virtual environment was not created successfully because ensurepip is not\\n'
  printf 'available.  On Debian/Ubuntu systems, you need to install the python3-venv\\n\\n'
  printf 'Failing command: %s\\n' "$3/bin/python3"
  exit 1
fi
exec {sys.executable} "$@"
"""
    )
    fake.chmod(0o755)
    done = venv_sh(repo, python=fake)
    assert done.returncode != 0
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "venv .venv failed: Failing command" in done.stderr
    assert not (repo / ".venv").exists()


def test_a_half_made_venv_is_made_again_and_a_healthy_one_kept(repo: Path) -> None:
    # the .venv a failed attempt leaves: python runs, pip is missing
    venv = repo / ".venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    done = venv_sh(repo)
    assert done.returncode == 0, done.stderr
    assert "is incomplete" in done.stderr
    assert installed(repo)
    marker = venv / "kept"
    marker.touch()
    assert venv_sh(repo).returncode == 0
    assert marker.exists()
    # a python that no longer runs (its interpreter moved away) counts as half made
    for python in (venv / "bin").glob("python*"):
        python.unlink()
    (venv / "bin/python").symlink_to(venv / "no-such-python")
    assert venv_sh(repo).returncode == 0
    assert not marker.exists()
    assert installed(repo)
