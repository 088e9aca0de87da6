"""scripts/activemq.sh install: the Recommends it needs, and ACTIVEMQ_HOME off Debian."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.deploy.compose_file import ROOT

SCRIPT = ROOT / "scripts/activemq.sh"


def install(home: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(SCRIPT), "install"],
        # no apt-get on this PATH: a script that tried to install would fail differently
        env={"PATH": "/bin:/usr/bin", "ACTIVEMQ_HOME": str(home)},
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


def test_debian_install_names_the_recommends_the_broker_needs() -> None:
    text = SCRIPT.read_text()
    assert "DEBIAN_PACKAGES=(activemq libxstream-java libjettison-java)" in text
    assert 'apt-get install -y "${DEBIAN_PACKAGES[@]}"' in text


def test_activemq_home_elsewhere_is_checked_not_installed_over(tmp_path: Path) -> None:
    done = install(tmp_path)
    assert done.returncode == 1
    assert f"ACTIVEMQ_HOME={tmp_path} lacks" in done.stderr
    assert f"{tmp_path}/bin/activemq.jar" in done.stderr


def test_an_apache_tarball_layout_is_accepted(tmp_path: Path) -> None:
    # the upstream distribution keeps xstream and jettison in lib/optional
    (tmp_path / "bin").mkdir()
    (tmp_path / "lib/optional").mkdir(parents=True)
    for jar in ("bin/activemq.jar", "lib/optional/xstream-1.4.20.jar"):
        (tmp_path / jar).touch()
    (tmp_path / "lib/optional/jettison-1.5.4.jar").touch()
    done = install(tmp_path)
    assert done.returncode == 0, done.stderr
    assert "already installed" in done.stdout
