"""``python -m bench.events --quick``: the harness works and its correctness checks hold.

Speed and memory are reported by the benchmark, never asserted here (docs/PRINCIPLES.md
§7); only that it prints its JSON line and that every correctness check held.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_quick_events_bench_holds_its_checks() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TEPAT_")}
    proc = subprocess.run(
        [sys.executable, "-m", "bench.events", "--quick", "--json"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["scenario"] == "events" and result["ok"], result
    assert result["checks"] and all(result["checks"].values()), result["checks"]
    assert result["parameters"]["users"] == 2000
    for figure in ("campaign_api_seconds", "recipients_per_second", "goal_api_seconds"):
        assert figure in result["figures"]
