"""STOMP over TLS (``stomp+ssl://``, issue 11 defect 8) on a real ActiveMQ with a test CA.

The module makes a CA, a server certificate for ``localhost`` (only: so that
``127.0.0.1`` is a host-name mismatch), a client certificate and an unrelated
"wrong" CA with ``openssl``, a PKCS12 key store and trust store for the broker
(``openssl pkcs12``, ``keytool``), and starts its own broker with
``scripts/activemq.sh`` from a copy of ``deploy/activemq/conf`` with two TLS
connectors added: one plain STOMP+SSL, one that needs a client certificate.
Every port is a free one: the dev broker and the test command's broker on 61613
are never touched.

Skipped when Java, ``keytool``, ``openssl`` or ActiveMQ is missing, except in
CI (``CI=true``) or under ``scripts/test.sh`` (``TEPAT_TEST_ACTIVEMQ_BASE``), which
install them: there it fails instead.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import ssl
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tepat.adapters.stomp import BrokerRefused, StompBroker, TlsFiles, parse_stomp_url
from tepat.adapters.stomp.link import Link
from tepat.clock import SystemClock
from tepat.config import ConfigError, Settings, load_settings
from tepat.ports.broker import Broker
from tepat.runtime import make_broker, open_runtime

pytestmark = pytest.mark.activemq

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "activemq.sh"
CONF_SRC = ROOT / "deploy" / "activemq" / "conf"
STORE_PASSWORD = "tepat-test"


def _must_run() -> bool:
    return os.environ.get("CI") == "true" or bool(os.environ.get("TEPAT_TEST_ACTIVEMQ_BASE"))


def _need(what: str, present: bool) -> None:
    if present:
        return
    if _must_run():
        pytest.fail(f"the TLS test must run here, but {what} is missing")
    pytest.skip(f"{what} is missing (scripts/activemq.sh install brings Java and ActiveMQ)")


def _run(*cmd: str | Path, cwd: Path) -> None:
    done = subprocess.run([str(c) for c in cmd], cwd=cwd, capture_output=True, text=True)
    assert done.returncode == 0, f"{cmd[0]} failed:\n{done.stdout}\n{done.stderr}"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@dataclass(frozen=True)
class Pki:
    dir: Path
    ca: Path
    wrong_ca: Path
    client_cert: Path
    client_key: Path
    keystore: Path
    truststore: Path


def _make_pki(d: Path) -> Pki:
    """A test CA, the broker's certificate (DNS:localhost), a client certificate, a wrong CA."""
    _need("openssl", shutil.which("openssl") is not None)
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"]
    for ca in ("ca", "wrong-ca"):
        _run(
            "openssl", "req", "-x509", *ec, "-keyout", f"{ca}.key", "-out", f"{ca}.pem",
            "-days", "2", "-subj", f"/CN=Tepat test {ca}",
            "-addext", "basicConstraints=critical,CA:TRUE",
            "-addext", "keyUsage=critical,keyCertSign,cRLSign",
            cwd=d,
        )  # fmt: skip
    for name, ext in (
        ("server", "subjectAltName=DNS:localhost\nextendedKeyUsage=serverAuth\n"),
        ("client", "extendedKeyUsage=clientAuth\n"),
    ):
        (d / f"{name}.ext").write_text(ext)
        _run(
            "openssl", "req", "-new", *ec, "-keyout", f"{name}.key", "-out", f"{name}.csr",
            "-subj", f"/CN={'localhost' if name == 'server' else 'tepat-client'}",
            cwd=d,
        )  # fmt: skip
        _run(
            "openssl", "x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
            "-CAcreateserial", "-days", "2", "-extfile", f"{name}.ext", "-out", f"{name}.pem",
            cwd=d,
        )  # fmt: skip
    _run(
        "openssl", "pkcs12", "-export", "-in", "server.pem", "-inkey", "server.key",
        "-certfile", "ca.pem", "-name", "broker", "-out", "broker.p12",
        "-passout", f"pass:{STORE_PASSWORD}",
        cwd=d,
    )  # fmt: skip
    _need("keytool", shutil.which("keytool") is not None)
    _run(
        "keytool", "-importcert", "-noprompt", "-alias", "tepat-test-ca", "-file", "ca.pem",
        "-keystore", "trust.p12", "-storetype", "PKCS12", "-storepass", STORE_PASSWORD,
        cwd=d,
    )  # fmt: skip
    return Pki(
        dir=d,
        ca=d / "ca.pem",
        wrong_ca=d / "wrong-ca.pem",
        client_cert=d / "client.pem",
        client_key=d / "client.key",
        keystore=d / "broker.p12",
        truststore=d / "trust.p12",
    )


@dataclass(frozen=True)
class TlsBroker:
    pki: Pki
    plain_port: int  # stomp://
    tls_port: int  # stomp+ssl://
    mutual_port: int  # stomp+ssl://, client certificate required

    def url(self, host: str = "localhost", port: int | None = None) -> str:
        return f"stomp+ssl://{host}:{port or self.tls_port}"


def _broker_conf(conf: Path, pki: Pki, tls_port: int, mutual_port: int) -> None:
    shutil.copytree(CONF_SRC, conf)
    xml = conf / "activemq.xml"
    text = xml.read_text()
    anchor = "    <transportConnectors>\n"
    assert text.count(anchor) == 1, "deploy/activemq/conf/activemq.xml changed its connectors"
    stores = (
        f'keyStore="file:{pki.keystore}" keyStorePassword="{STORE_PASSWORD}" keyStoreType="PKCS12"'
        f' trustStore="file:{pki.truststore}" trustStorePassword="{STORE_PASSWORD}"'
        ' trustStoreType="PKCS12"'
    )
    connectors = (
        f'      <transportConnector name="stomp+ssl" uri="stomp+ssl://127.0.0.1:{tls_port}"/>\n'
        '      <transportConnector name="stomp+ssl-mutual"'
        f' uri="stomp+ssl://127.0.0.1:{mutual_port}?needClientAuth=true"/>\n'
    )
    text = text.replace(anchor, f"    <sslContext><sslContext {stores}/></sslContext>\n{anchor}")
    text = text.replace(anchor, anchor + connectors)
    xml.write_text(text)


def _wait_listening(port: int, within: float) -> None:
    """Until the broker accepts on ``port`` (the start script waits for plain STOMP only)."""
    deadline = time.monotonic() + within
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), 1).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise AssertionError(f"nothing listens on {port} after {within} s") from None
            time.sleep(0.05)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return _make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def tls_broker(tmp_path_factory: pytest.TempPathFactory, pki: Pki) -> Iterator[TlsBroker]:
    home = Path(os.environ.get("ACTIVEMQ_HOME") or "/usr/share/activemq")
    _need("java", shutil.which("java") is not None)
    _need(f"ActiveMQ ({home}/bin/activemq.jar)", (home / "bin" / "activemq.jar").is_file())
    base = tmp_path_factory.mktemp("amq-tls")
    ports = TlsBroker(pki, _free_port(), _free_port(), _free_port())
    _broker_conf(base / "conf-src", pki, ports.tls_port, ports.mutual_port)
    env = {
        **os.environ,
        "AMQ_CONF_SRC": str(base / "conf-src"),
        "TEPAT_AMQ_STOMP_PORT": str(ports.plain_port),
        "TEPAT_AMQ_OPENWIRE_PORT": str(_free_port()),
    }
    broker_base = base / "broker"
    started = subprocess.run(
        [str(SCRIPT), "start", str(broker_base)], env=env, capture_output=True, text=True
    )
    try:
        assert started.returncode == 0, f"{started.stdout}\n{started.stderr}"
        _wait_listening(ports.tls_port, 30)
        _wait_listening(ports.mutual_port, 30)
        yield ports
    finally:
        subprocess.run([str(SCRIPT), "stop", str(broker_base)], env=env, capture_output=True)


async def _round_trip(broker: Broker) -> None:
    """Publish, consume, ack and read the queue's stats over the given broker."""
    queue = f"tls.{uuid.uuid4().hex[:12]}"
    body = f"over TLS {uuid.uuid4()}".encode()
    await broker.connect()
    try:
        async with broker.consume([queue], prefetch=5) as deliveries:
            await broker.publish(queue, body)
            delivery = await asyncio.wait_for(anext(aiter(deliveries)), 15)
            assert (delivery.queue, delivery.body) == (queue, body)
            await broker.ack(delivery)
        [stats] = await broker.stats([queue])
        assert (stats.ready, stats.in_flight, stats.dead_letters) == (0, 0, 0)
    finally:
        await broker.close()


def _settings(**values: str) -> Settings:
    return load_settings(metrics_port=0, **values)


# -- against the broker -------------------------------------------------------


async def test_round_trip_over_tls_from_the_settings(tls_broker: TlsBroker) -> None:
    settings = _settings(broker_url=tls_broker.url(), broker_ca_file=str(tls_broker.pki.ca))
    broker = make_broker(settings, SystemClock())
    assert isinstance(broker, StompBroker)
    assert broker.target.tls == TlsFiles(ca_file=str(tls_broker.pki.ca))
    await _round_trip(broker)


async def test_round_trip_with_a_client_certificate(tls_broker: TlsBroker) -> None:
    pki = tls_broker.pki
    settings = _settings(
        broker_url=tls_broker.url(port=tls_broker.mutual_port),
        broker_ca_file=str(pki.ca),
        broker_cert_file=str(pki.client_cert),
        broker_key_file=str(pki.client_key),
    )
    await _round_trip(make_broker(settings, SystemClock()))


async def _refusal(url: str, tls: TlsFiles, request_timeout: float = 5) -> BrokerRefused:
    broker = StompBroker(url, tls=tls, request_timeout=request_timeout)
    try:
        with pytest.raises(BrokerRefused) as caught:
            await broker.connect()
    finally:
        await broker.close()
    return caught.value


async def test_a_wrong_ca_is_refused_with_the_reason(tls_broker: TlsBroker) -> None:
    wrong = str(tls_broker.pki.wrong_ca)
    e = await _refusal(tls_broker.url(), TlsFiles(ca_file=wrong))
    assert e.setting == "ca_file"
    # OpenSSL's reason, not stomp.py's bare ConnectFailedException
    assert "certificate verify failed: self-signed certificate in certificate chain" in str(e), e
    assert f"trusting the CAs in {wrong}" in str(e)


async def test_the_system_cas_do_not_trust_a_private_ca(tls_broker: TlsBroker) -> None:
    e = await _refusal(tls_broker.url(), TlsFiles())
    assert e.setting == "ca_file"
    assert "trusting the system CAs" in str(e) or "trusting certifi's CAs" in str(e), e


async def test_the_host_name_is_verified(tls_broker: TlsBroker) -> None:
    # the certificate names localhost only
    e = await _refusal(tls_broker.url(host="127.0.0.1"), TlsFiles(ca_file=str(tls_broker.pki.ca)))
    assert e.setting == "url"
    assert "IP address mismatch" in str(e), e


async def test_tls_to_the_plain_port_says_so(tls_broker: TlsBroker) -> None:
    url = tls_broker.url(port=tls_broker.plain_port)
    # the plain port waits for a frame: the connect can only time out
    e = await _refusal(url, TlsFiles(ca_file=str(tls_broker.pki.ca)), request_timeout=2)
    assert e.setting == "url"
    assert "speaks plain STOMP, not TLS" in str(e), e


async def test_plain_stomp_to_the_tls_port_says_so(tls_broker: TlsBroker) -> None:
    broker = StompBroker(f"stomp://localhost:{tls_broker.tls_port}", request_timeout=5)
    try:
        with pytest.raises(BrokerRefused) as caught:
            await broker.connect()
    finally:
        await broker.close()
    assert caught.value.setting == "url"
    assert "speaks TLS: use stomp+ssl://" in str(caught.value), caught.value


async def test_a_missing_or_unknown_client_certificate_is_named(tls_broker: TlsBroker) -> None:
    url = tls_broker.url(port=tls_broker.mutual_port)
    pki = tls_broker.pki
    e = await _refusal(url, TlsFiles(ca_file=str(pki.ca)))
    assert e.setting == "cert_file"
    assert "the broker refused the client certificate" in str(e), e
    # one the broker's trust store does not know
    untrusted = TlsFiles(str(pki.ca), str(pki.dir / "wrong-ca.pem"), str(pki.dir / "wrong-ca.key"))
    e = await _refusal(url, untrusted)
    assert e.setting == "cert_file"
    assert "the broker refused the client certificate" in str(e), e


async def test_a_refused_broker_stops_the_runtime_with_one_line(tls_broker: TlsBroker) -> None:
    settings = _settings(
        broker_url=tls_broker.url(),
        broker_ca_file=str(tls_broker.pki.wrong_ca),
        database_url="sqlite:///:memory:",
    )
    with pytest.raises(ConfigError) as caught:
        async with open_runtime(settings):
            pass
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith("tepat: bad configuration: TEPAT_BROKER_CA_FILE: "), message
    assert "certificate verify failed" in message


@pytest.mark.parametrize(
    ("case", "variable", "reason"),
    [
        ("wrong CA", "TEPAT_BROKER_CA_FILE", "certificate verify failed"),
        # refused after the handshake (TLS 1.3): stomp.py used to wait for CONNECTED
        # forever, and the process never exited
        ("no client certificate", "TEPAT_BROKER_CERT_FILE", "refused the client certificate"),
    ],
)
def test_the_cli_stops_with_one_line(
    tls_broker: TlsBroker, tmp_path: Path, case: str, variable: str, reason: str
) -> None:
    wrong_ca = case == "wrong CA"
    pki = tls_broker.pki
    env = {
        **os.environ,
        "TEPAT_BROKER_URL": tls_broker.url(port=None if wrong_ca else tls_broker.mutual_port),
        "TEPAT_BROKER_CA_FILE": str(pki.wrong_ca if wrong_ca else pki.ca),
        "TEPAT_DATABASE_URL": f"sqlite:///{tmp_path}/tepat.db",
        "TEPAT_METRICS_PORT": "0",
        "TEPAT_LOG_LEVEL": "ERROR",
    }
    done = subprocess.run(
        [sys.executable, "-m", "tepat.cli", "consumers"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith(f"tepat: bad configuration: {variable}: "), done.stderr
    assert reason in last


# -- without a broker -----------------------------------------------------------


async def test_a_dropped_tls_connection_is_lost_at_once(pki: Pki) -> None:
    """A TLS connection the broker closes is reported lost at once, not at the heartbeat
    timeout (stomp.py's non-blocking TLS loop took the end of the stream for "no data")."""
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server.load_cert_chain(pki.dir / "server.pem", pki.dir / "server.key")
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    drop = threading.Event()

    def serve() -> None:
        conn, _ = listener.accept()
        with server.wrap_socket(conn, server_side=True) as tls_conn:
            received = b""
            while b"\0" not in received:
                received += tls_conn.recv(4096)
            # no heart-beats: only the end of the stream can tell the client
            tls_conn.sendall(b"CONNECTED\nversion:1.2\nheart-beat:0,0\n\n\0")
            drop.wait(30)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    lost = asyncio.Event()
    target = parse_stomp_url(f"stomp+ssl://localhost:{port}", TlsFiles(ca_file=str(pki.ca)))
    link = Link(target, "drop", heartbeat_ms=0, timeout=5, on_lost=lambda _: lost.set())
    try:
        await link.open()
        drop.set()
        await asyncio.wait_for(lost.wait(), 5)
    finally:
        drop.set()
        await link.close()
        listener.close()


def test_stomp_ssl_urls_default_to_61614_and_verify() -> None:
    target = parse_stomp_url("stomp+ssl://user:p%40ss@b-1234.mq.eu-west-1.amazonaws.com")
    assert (target.host, target.port, target.user, target.password) == (
        "b-1234.mq.eu-west-1.amazonaws.com",
        61614,
        "user",
        "p@ss",
    )
    assert target.tls == TlsFiles()
    assert parse_stomp_url("stomp://h").tls is None
    with pytest.raises(ValueError, match="plain stomp://"):
        parse_stomp_url("stomp://h", TlsFiles(ca_file="/x.pem"))


def _config_error(**values: str) -> str:
    with pytest.raises(ConfigError) as caught:
        _settings(**values)
    message = str(caught.value)
    assert "\n" not in message
    return message


def test_bad_tls_settings_stop_with_one_line_naming_the_variable(pki: Pki, tmp_path: Path) -> None:
    ssl_url = "stomp+ssl://user:secret@broker.example:61614"
    not_pem = tmp_path / "not.pem"
    not_pem.write_text("hello\n")
    cases = {
        "TEPAT_BROKER_URL": {"broker_url": "stomp+ssl://user:secret@host:notaport"},
        "TEPAT_BROKER_CA_FILE": {"broker_url": ssl_url, "broker_ca_file": str(tmp_path / "no")},
        "TEPAT_BROKER_CA_FILE: only used with stomp+ssl://": {
            "broker_url": "stomp://h:61613",
            "broker_ca_file": str(pki.ca),
        },
        "TEPAT_BROKER_CA_FILE: " + str(not_pem): {
            "broker_url": ssl_url,
            "broker_ca_file": str(not_pem),
        },
        "TEPAT_BROKER_CERT_FILE: unset, but TEPAT_BROKER_KEY_FILE": {
            "broker_url": ssl_url,
            "broker_key_file": str(pki.client_key),
        },
        "TEPAT_BROKER_CERT_FILE: the key does not belong": {
            "broker_url": ssl_url,
            "broker_cert_file": str(pki.client_cert),
            "broker_key_file": str(pki.dir / "server.key"),
        },
        "TEPAT_BROKER_CERT_FILE: cannot load": {
            "broker_url": ssl_url,
            "broker_cert_file": str(pki.client_cert),  # no key in it, and no key file
        },
    }
    for expected, values in cases.items():
        message = _config_error(**values)
        assert message.startswith(f"tepat: bad configuration: {expected}"), message
        assert "secret" not in message


def test_good_tls_settings_load(pki: Pki) -> None:
    settings = _settings(
        broker_url="stomp+ssl://broker.example",
        broker_ca_file=str(pki.ca),
        broker_cert_file=str(pki.client_cert),
        broker_key_file=str(pki.client_key),
    )
    broker = make_broker(settings, SystemClock())
    assert isinstance(broker, StompBroker)
    assert broker.target.tls == TlsFiles(str(pki.ca), str(pki.client_cert), str(pki.client_key))
    # empty values are unset (an `environment:` entry left blank)
    assert _settings(broker_url="stomp+ssl://b", broker_ca_file="").broker_ca_file is None
