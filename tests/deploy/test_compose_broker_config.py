"""The compose broker config boots on the ActiveMQ the suite tests (Debian's 5.17).

docker-compose.yml runs deploy/docker/activemq.xml, which imports the tested config
(deploy/activemq/conf/activemq.xml, as tepat-broker.xml) and the image's jetty.xml.
Here the same two files start a broker through scripts/activemq.sh, with a jetty.xml
that defines nothing (Debian's package has no web console) and the bindings given as
the system properties the compose entrypoint sets. The image itself (5.18.6) is not
run here: there is no Docker engine.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.deploy.compose_file import ROOT

pytestmark = [pytest.mark.activemq, pytest.mark.slow]

SCRIPT = ROOT / "scripts/activemq.sh"
AMQ_HOME = Path(os.environ.get("ACTIVEMQ_HOME", "/usr/share/activemq"))
EMPTY_BEANS = """<beans xmlns="http://www.springframework.org/schema/beans"
  xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance"
  xsi:schemaLocation="http://www.springframework.org/schema/beans http://www.springframework.org/schema/beans/spring-beans.xsd"/>
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@pytest.fixture
def compose_conf(tmp_path: Path) -> Path:
    conf = tmp_path / "conf"
    conf.mkdir()
    shutil.copy(ROOT / "deploy/docker/activemq.xml", conf / "activemq.xml")
    shutil.copy(ROOT / "deploy/activemq/conf/activemq.xml", conf / "tepat-broker.xml")
    shutil.copy(ROOT / "deploy/activemq/conf/log4j.properties", conf / "log4j.properties")
    (conf / "jetty.xml").write_text(EMPTY_BEANS)
    return conf


@pytest.fixture
def broker(tmp_path: Path, compose_conf: Path) -> Iterator[int]:
    with _running(tmp_path, compose_conf) as stomp:
        yield stomp


@contextmanager
def _running(tmp_path: Path, compose_conf: Path) -> Iterator[int]:
    if not (AMQ_HOME / "bin/activemq.jar").is_file() or shutil.which("java") is None:
        pytest.skip(f"no ActiveMQ at {AMQ_HOME} (scripts/activemq.sh install)")
    stomp = free_port()
    env = {
        **os.environ,
        "AMQ_CONF_SRC": str(compose_conf),
        "TEPAT_AMQ_STOMP_PORT": str(stomp),
        "TEPAT_AMQ_OPENWIRE_PORT": str(free_port()),
    }
    base = tmp_path / "base"
    started = subprocess.run(
        ["bash", str(SCRIPT), "start", str(base)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert started.returncode == 0, started.stderr
    try:
        yield stomp
    finally:
        subprocess.run(["bash", str(SCRIPT), "stop", str(base)], env=env, timeout=60, check=False)


def stomp_connect(port: int, login: str = "") -> str:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(f"CONNECT\naccept-version:1.2\nhost:tepat\n{login}\n\x00".encode())
        reply = b""
        while b"\x00" not in reply:
            chunk = s.recv(4096)
            if not chunk:
                break
            reply += chunk
    return reply.decode()


def test_compose_broker_config_boots_and_serves_stomp(broker: int) -> None:
    reply = stomp_connect(broker)
    assert reply.startswith("CONNECTED\n"), reply
    assert "server:ActiveMQ/" in reply


def test_with_the_entrypoints_credentials_anonymous_clients_are_refused(
    tmp_path: Path, compose_conf: Path
) -> None:
    """The file deploy/docker/activemq-entrypoint.sh writes turns anonymous access off."""
    (compose_conf / "tepat-broker-credentials.properties").write_text(
        "activemq.anonymous=false\nactivemq.user=tepat\nactivemq.password=brokerPw\n"
    )
    with _running(tmp_path, compose_conf) as port:
        assert stomp_connect(port).startswith("ERROR\n")
        assert stomp_connect(port, "login:tepat\npasscode:wrong\n").startswith("ERROR\n")
        reply = stomp_connect(port, "login:tepat\npasscode:brokerPw\n")
        assert reply.startswith("CONNECTED\n"), reply
