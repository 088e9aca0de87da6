"""deploy/docker/activemq-entrypoint.sh, run here against a stand-in ActiveMQ home.

The script is what makes the compose broker's console password take effect and keeps
its 0.0.0.0 bindings whatever ACTIVEMQ_OPTS says; ``bin/activemq`` is replaced by a
stub that records the environment it was started with.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.deploy.compose_file import ROOT

SCRIPT = ROOT / "deploy/docker/activemq-entrypoint.sh"
# 5.x's jetty.xml reads a realm file; 6.x's logs in through JAAS
JETTY_5 = '<property name="config" value="${activemq.conf}/jetty-realm.properties" />'
JETTY_6 = '<bean id="securityLoginService" class="org.eclipse.jetty.jaas.JAASLoginService">'
STUB = """#!/usr/bin/env bash
printf '%s\\n' "$ACTIVEMQ_OPTS" > "$ACTIVEMQ_HOME/started-with"
printf '%s\\n' "$@" > "$ACTIVEMQ_HOME/started-args"
"""


def make_home(tmp_path: Path, jetty: str) -> Path:
    home = tmp_path / "activemq"
    (home / "conf").mkdir(parents=True)
    (home / "bin").mkdir()
    (home / "conf/jetty.xml").write_text(f"<beans>{jetty}</beans>\n")
    (home / "conf/jetty-realm.properties").write_text("admin: admin, admin\nuser: user, user\n")
    stub = home / "bin/activemq"
    stub.write_text(STUB)
    stub.chmod(0o755)
    return home


def run(home: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(SCRIPT)],
        env={
            "PATH": "/usr/bin:/bin",
            "ACTIVEMQ_HOME": str(home),
            "ACTIVEMQ_BROKER_PASSWORD": "broker-pw",
            **env,
        },
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


def test_console_password_replaces_every_default_account_on_5x(tmp_path: Path) -> None:
    home = make_home(tmp_path, JETTY_5)
    done = run(home, ACTIVEMQ_CONSOLE_USER="ops", ACTIVEMQ_CONSOLE_PASSWORD="s3cret-Pw")
    assert done.returncode == 0, done.stderr
    realm = home / "conf/jetty-realm.properties"
    assert realm.read_text() == "ops: s3cret-Pw, admin\n"  # admin/admin and user/user are gone
    assert realm.stat().st_mode & 0o077 == 0
    assert (home / "started-args").read_text().split() == ["console"]


def test_broker_credentials_turn_anonymous_clients_away(tmp_path: Path) -> None:
    home = make_home(tmp_path, JETTY_5)
    done = run(home, ACTIVEMQ_CONSOLE_PASSWORD="pw", ACTIVEMQ_BROKER_PASSWORD="b-r0ker_pw")
    assert done.returncode == 0, done.stderr
    credentials = home / "conf/tepat-broker-credentials.properties"
    assert credentials.read_text() == (
        "activemq.anonymous=false\nactivemq.user=tepat\nactivemq.password=b-r0ker_pw\n"
    )
    assert credentials.stat().st_mode & 0o077 == 0
    assert "b-r0ker_pw" not in done.stdout + done.stderr


def test_console_password_goes_to_jaas_files_on_6x(tmp_path: Path) -> None:
    home = make_home(tmp_path, JETTY_6)
    done = run(home, ACTIVEMQ_CONSOLE_PASSWORD="s3cret-Pw")
    assert done.returncode == 0, done.stderr
    assert (home / "conf/users.properties").read_text() == "admin=s3cret-Pw\n"
    assert (home / "conf/groups.properties").read_text() == "admins=admin\n"


@pytest.mark.parametrize("opts", ["", "-Xmx2g -XX:+UseG1GC", "-Djetty.host=127.0.0.1"])
def test_activemq_opts_never_drop_the_bindings(tmp_path: Path, opts: str) -> None:
    home = make_home(tmp_path, JETTY_5)
    env = {"ACTIVEMQ_CONSOLE_PASSWORD": "pw", "ACTIVEMQ_HEAP": "768m"}
    if opts:
        env["ACTIVEMQ_OPTS"] = opts
    done = run(home, **env)
    assert done.returncode == 0, done.stderr
    flags = (home / "started-with").read_text().split()
    for given in opts.split():
        assert given in flags
    # a repeated -D or -Xmx: the JVM keeps the last one
    last = {f.split("=")[0]: f for f in flags if f.startswith("-D")}
    assert last["-Djetty.host"] == "-Djetty.host=0.0.0.0"
    assert last["-Dactivemq.bind"] == "-Dactivemq.bind=0.0.0.0"
    assert [f for f in flags if f.startswith("-Xmx")][-1] == "-Xmx768m"
    assert f"-Djava.security.auth.login.config={home}/conf/login.config" in flags


@pytest.mark.parametrize(
    ("env", "says"),
    [
        ({}, "ACTIVEMQ_CONSOLE_PASSWORD is not set"),
        ({"ACTIVEMQ_CONSOLE_PASSWORD": "a b"}, "ACTIVEMQ_CONSOLE_PASSWORD: no spaces"),
        (
            {"ACTIVEMQ_CONSOLE_PASSWORD": "pw", "ACTIVEMQ_CONSOLE_USER": "a:b"},
            "ACTIVEMQ_CONSOLE_USER",
        ),
        ({"ACTIVEMQ_CONSOLE_PASSWORD": "pw", "ACTIVEMQ_HEAP": "lots"}, "ACTIVEMQ_HEAP"),
        (
            {"ACTIVEMQ_CONSOLE_PASSWORD": "pw", "ACTIVEMQ_BROKER_PASSWORD": ""},
            "ACTIVEMQ_BROKER_PASSWORD is not set",
        ),
        (
            {"ACTIVEMQ_CONSOLE_PASSWORD": "pw", "ACTIVEMQ_BROKER_PASSWORD": "a@b"},
            "ACTIVEMQ_BROKER_PASSWORD: letters",
        ),
    ],
)
def test_bad_settings_stop_the_broker_with_one_line(
    tmp_path: Path, env: dict[str, str], says: str
) -> None:
    home = make_home(tmp_path, JETTY_5)
    done = run(home, **env)
    assert done.returncode != 0
    assert says in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert not (home / "started-with").exists()
    # the image's default accounts are not left half-changed
    assert "admin: admin" in (home / "conf/jetty-realm.properties").read_text()


def test_a_console_it_cannot_secure_is_not_started(tmp_path: Path) -> None:
    home = make_home(tmp_path, "<bean id='somethingElse'/>")
    done = run(home, ACTIVEMQ_CONSOLE_PASSWORD="pw")
    assert done.returncode != 0
    assert "cannot set the console password" in done.stderr
    assert not (home / "started-with").exists()
