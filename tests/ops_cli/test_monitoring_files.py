"""deploy/prometheus and deploy/grafana: valid, about metrics Tepat really exports, and every
alert has its section in docs/OPERATIONS.md. With promtool (from Debian's `prometheus` package:
scripts/promtool.sh, run by scripts/test.sh) the rules are also checked and unit-tested."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import generate_latest
from prometheus_client.metrics import MetricWrapperBase
from prometheus_client.parser import text_string_to_metric_families

from tepat import metrics
from tests.ops_cli.support import ROOT

ALERTS = ROOT / "deploy/prometheus/alerts.yml"
PROMETHEUS = ROOT / "deploy/prometheus/prometheus.yml"
GRAFANA = ROOT / "deploy/grafana/tepat.json"
OPERATIONS = ROOT / "docs/OPERATIONS.md"
PROMTOOL_TESTS = Path(__file__).with_name("alerts_promtool_test.yml")
# Series names in PromQL: Tepat's own and the process collector's.
NAME = re.compile(r"\b((?:tepat|process)_[a-z0-9_]+)\b")


def exported_names() -> set[str]:
    """Every sample name in the exposition once each labelled metric has a child."""
    for value in vars(metrics).values():
        if isinstance(value, MetricWrapperBase) and value._labelnames:
            value.labels(*["probe"] * len(value._labelnames))
    text = generate_latest(metrics.REGISTRY).decode()
    return {s.name for family in text_string_to_metric_families(text) for s in family.samples}


def alert_rules() -> list[dict[str, Any]]:
    doc = yaml.safe_load(ALERTS.read_text())
    return [rule for group in doc["groups"] for rule in group["rules"]]


def grafana_exprs() -> list[str]:
    dash = json.loads(GRAFANA.read_text())
    exprs = [t["expr"] for p in dash["panels"] for t in p.get("targets", [])]
    exprs += [v["definition"] for v in dash["templating"]["list"] if "definition" in v]
    return exprs


def test_every_metric_in_the_rules_and_the_dashboard_is_exported() -> None:
    exported = exported_names()
    used = {n for rule in alert_rules() for n in NAME.findall(rule["expr"])}
    used |= {n for expr in grafana_exprs() for n in NAME.findall(expr)}
    assert used, "no metric names found"
    assert sorted(used - exported) == []


def test_alert_rules_are_complete_and_documented() -> None:
    rules = alert_rules()
    headings = {
        "#" + re.sub(r"[^a-z0-9 -]", "", h.strip().lower()).replace(" ", "-")
        for h in re.findall(r"^#+ (.+)$", OPERATIONS.read_text(), re.M)
    }
    names = [r["alert"] for r in rules]
    assert len(names) == len(set(names))
    for rule in rules:
        assert {"alert", "expr", "for", "labels", "annotations"} <= rule.keys(), rule["alert"]
        assert rule["labels"]["severity"] in {"warning", "critical"}
        assert {"summary", "description", "runbook"} <= rule["annotations"].keys()
        anchor = rule["annotations"]["runbook"].removeprefix("docs/OPERATIONS.md")
        assert anchor in headings, f"{rule['alert']}: no heading for {anchor} in OPERATIONS.md"


def test_grafana_dashboard_is_importable() -> None:
    dash = json.loads(GRAFANA.read_text())
    assert dash["uid"] and dash["title"] and isinstance(dash["schemaVersion"], int)
    assert "id" not in dash  # an id would clash with the importing instance's dashboards
    variables = {v["name"]: v for v in dash["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids))
    for panel in dash["panels"]:
        assert {"x", "y", "w", "h"} <= panel["gridPos"].keys()
        if panel["type"] != "row":
            assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
            assert panel["targets"], panel["title"]


def _promtool() -> str:
    local = ROOT / ".venv/bin/promtool"
    tool = str(local) if local.exists() else shutil.which("promtool")
    if tool is None:
        pytest.skip("promtool not installed (scripts/promtool.sh; scripts/test.sh runs it)")
    return tool


def test_promtool_checks_the_rules_and_the_example_config() -> None:
    tool = _promtool()
    for args in (["check", "rules", str(ALERTS)], ["check", "config", str(PROMETHEUS)]):
        done = subprocess.run([tool, *args], capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stdout + done.stderr


def test_promtool_unit_tests_fire_each_alert_when_it_should(tmp_path: Path) -> None:
    tool = _promtool()
    # promtool compares annotations verbatim; the scenarios are about when alerts fire.
    doc = yaml.safe_load(ALERTS.read_text())
    for group in doc["groups"]:
        for rule in group["rules"]:
            rule.pop("annotations", None)
    (tmp_path / "alerts.yml").write_text(yaml.safe_dump(doc))
    shutil.copy(PROMTOOL_TESTS, tmp_path / "tests.yml")
    done = subprocess.run(
        [tool, "test", "rules", "tests.yml"], cwd=tmp_path, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stdout + done.stderr
    fired = {
        t["alertname"]
        for s in yaml.safe_load(PROMTOOL_TESTS.read_text())["tests"]
        for t in s["alert_rule_test"]
        if t["exp_alerts"]
    }
    assert fired == {r["alert"] for r in alert_rules()}, "every alert has a scenario that fires it"
