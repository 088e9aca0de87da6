"""What a scenario returns, and how it is printed (text, or one JSON line)."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


@dataclass
class Correctness:
    """Every message ends sent exactly once, nothing lost."""

    expected: int
    sent: int
    duplicates: int
    lost: int
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.sent == self.expected and self.duplicates == 0 and self.lost == 0

    def as_dict(self) -> dict[str, Any]:
        return {
            "expected": self.expected,
            "sent": self.sent,
            "duplicates": self.duplicates,
            "lost": self.lost,
            "ok": self.ok,
            **self.details,
        }


@dataclass
class Result:
    scenario: str
    backend: str
    parameters: dict[str, Any]
    figures: dict[str, Any]
    goals: dict[str, bool]
    correctness: Correctness | None  # None: a scenario with its own check (plan)
    checks: dict[str, bool] = field(default_factory=dict)  # other correctness checks
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return (self.correctness is None or self.correctness.ok) and all(self.checks.values())

    def as_dict(self) -> dict[str, Any]:
        return {
            "scenario": self.scenario,
            "backend": self.backend,
            "ok": self.ok,
            "parameters": self.parameters,
            "figures": self.figures,
            "goals": self.goals,
            "correctness": None if self.correctness is None else self.correctness.as_dict(),
            "checks": self.checks,
            "notes": self.notes,
            **machine(),
        }


def git_revision() -> str:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        )
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return out.stdout.strip() or "unknown"


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def ram_mb() -> int | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) // 1024
    except (OSError, ValueError):
        pass
    return None


def machine() -> dict[str, Any]:
    return {
        "cpu_count": os.cpu_count(),
        "cpu_model": cpu_model(),
        "ram_mb": ram_mb(),
        "git_revision": git_revision(),
        "python": platform.python_version(),
    }


def emit(result: Result, as_json: bool) -> None:
    """Print one scenario's result: a JSON line, or a readable block."""
    if as_json:
        print(json.dumps(result.as_dict(), sort_keys=False, default=str), flush=True)
        return
    d = result.as_dict()
    print(f"== {result.scenario} on {result.backend}: {'OK' if result.ok else 'FAILED'}")
    for key in ("parameters", "figures", "goals", "correctness", "checks"):
        if d[key]:
            print(f"  {key}:")
            for k, v in d[key].items():
                print(f"    {k}: {v}")
    for note in result.notes:
        print(f"  note: {note}")
    sys.stdout.flush()


def log(message: str) -> None:
    """Progress on stderr, so that stdout carries only results."""
    print(f"[bench] {message}", file=sys.stderr, flush=True)
