"""Real `tepat` processes for the operations tests: start, wait, scrape, read their logs."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tepat.domain.categories import DEFAULT_CATEGORIES
from tests.support.waiting import eventually

ROOT = Path(__file__).resolve().parents[2]
# The metrics table lives under "## Metrics" on this page of the documentation site.
METRICS_PAGE = ROOT / "docs/guides/operations.md"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def stomp_url() -> str:
    """The shared ActiveMQ these processes talk through; skips the test without one."""
    url = os.environ.get("TEPAT_TEST_STOMP_URL", "")
    if not url:
        pytest.skip("TEPAT_TEST_STOMP_URL is not set (scripts/test.sh starts ActiveMQ)")
    return url


def child_env(overrides: dict[str, str]) -> dict[str, str]:
    """This environment minus any inherited ``TEPAT_*``, plus ``overrides``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TEPAT_")}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    env.update(overrides)
    return env


def categories_on_queues(prefix: str) -> str:
    """``TEPAT_CATEGORIES`` putting every default category on a queue of this run's own
    (``<prefix>.<category>``): processes of a test share a broker with other tests."""
    return json.dumps(
        {
            p.name: {"quiet_hours": p.quiet_hours.value, "queue": f"{prefix}.{p.name}"}
            for p in DEFAULT_CATEGORIES
        }
    )


@dataclass
class Proc:
    name: str
    popen: subprocess.Popen[bytes]
    stderr_path: Path

    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")

    def stop(self) -> int:
        """SIGTERM, then wait for the drain; returns the exit code."""
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait()
        return self.popen.returncode


@contextmanager
def tepat(name: str, args: list[str], env: dict[str, str], workdir: Path) -> Iterator[Proc]:
    """``tepat ARGS`` (this interpreter), its stderr in a file; stopped on exit."""
    path = workdir / f"{name}.stderr"
    with path.open("wb") as err:
        popen = subprocess.Popen(
            [sys.executable, "-m", "tepat.cli", *args],
            env=env,
            cwd=workdir,
            stdout=subprocess.DEVNULL,
            stderr=err,
        )
    proc = Proc(name, popen, path)
    try:
        yield proc
    finally:
        proc.stop()


async def wait_http(proc: Proc, url: str, timeout: float = 60) -> None:  # noqa: ASYNC109
    """Until ``url`` answers 200 (failing early, with its stderr, if the process died)."""
    async with httpx.AsyncClient(timeout=5) as client:

        async def up() -> bool:
            if proc.popen.poll() is not None:
                raise AssertionError(
                    f"{proc.name} exited {proc.popen.returncode}:\n{proc.stderr()}"
                )
            try:
                return (await client.get(url)).status_code == 200
            except httpx.TransportError:
                return False

        await eventually(up, timeout=timeout, what=f"{proc.name} at {url}")


@dataclass
class Exposition:
    """A parsed ``/metrics`` answer: family names as exported, and every sample."""

    text: str
    types: dict[str, str] = field(default_factory=dict)  # exported family name -> type
    samples: list[tuple[str, dict[str, str], float]] = field(default_factory=list)

    @classmethod
    def parse(cls, text: str) -> Exposition:
        exp = cls(text)
        for line in text.splitlines():
            if line.startswith("# TYPE "):
                _, _, name, kind = line.split(" ", 3)
                exp.types[name] = kind
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                exp.samples.append((s.name, dict(s.labels), float(s.value)))
        return exp

    def value(self, name: str, **labels: str) -> float | None:
        """The sample ``name`` whose labels include ``labels`` (None if absent)."""
        for n, ls, v in self.samples:
            if n == name and all(ls.get(k) == val for k, val in labels.items()):
                return v
        return None

    def labels_of(self, family: str) -> set[str] | None:
        """Label names of the family's samples (without ``le``); None if it has none."""
        found: set[str] | None = None
        for n, ls, _ in self.samples:
            if n == family or (n.startswith(family + "_") and n[len(family) + 1 :] in _SUFFIXES):
                found = (found or set()) | (set(ls) - {"le"})
        return found


_SUFFIXES = {"bucket", "sum", "count"}


async def scrape(url: str) -> Exposition:
    async with httpx.AsyncClient(timeout=10) as client:
        r = await client.get(url)
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("text/plain"), r.headers
    return Exposition.parse(r.text)


_ROW = re.compile(
    r"^\|\s*`(?P<name>[a-z_:][a-z0-9_:]*)`\s*\|\s*(?P<type>\w+)\s*\|(?P<labels>[^|]*)\|"
)


def documented_metrics() -> dict[str, tuple[str, set[str]]]:
    """The metrics page's table: exported family name -> (type, label names)."""
    text = METRICS_PAGE.read_text()
    start = text.index("\n## Metrics\n")
    end = text.find("\n## ", start + 1)
    listed: dict[str, tuple[str, set[str]]] = {}
    for line in text[start:end].splitlines():
        m = _ROW.match(line)
        if m:
            labels = set(re.findall(r"`([a-z_]+)`", m["labels"]))
            listed[m["name"]] = (m["type"], labels)
    return listed


def assert_metrics_page_lists_exactly(exp: Exposition) -> None:
    """Every exported family is on the metrics page with its type and labels, nothing else is."""
    listed = documented_metrics()
    assert listed, f"no metrics table under '## Metrics' in {METRICS_PAGE}"
    assert set(listed) == set(exp.types), (
        f"exported, not documented: {sorted(set(exp.types) - set(listed))}; "
        f"documented, not exported: {sorted(set(listed) - set(exp.types))}"
    )
    for name, (kind, labels) in listed.items():
        assert exp.types[name] == kind, f"{name}: documented as {kind}, exported {exp.types[name]}"
        seen = exp.labels_of(name)
        if seen is not None:
            assert seen == labels, (
                f"{name}: documented labels {sorted(labels)}, exported {sorted(seen)}"
            )


def json_lines(proc: Proc) -> list[dict[str, Any]]:
    """Every stderr line of ``proc`` as JSON (failing on the first line that is not)."""
    events: list[dict[str, Any]] = []
    for n, line in enumerate(proc.stderr().splitlines(), 1):
        try:
            event = json.loads(line)
        except json.JSONDecodeError:
            raise AssertionError(f"{proc.name} stderr line {n} is not JSON: {line!r}") from None
        assert isinstance(event, dict) and {"event", "level", "timestamp"} <= set(event), line
        events.append(event)
    return events
