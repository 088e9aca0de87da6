"""``python -m bench plan --scale --quick``: the scaling run works and its checks hold at
each size (every user planned, a second run creates nothing, no intent twice).
Speed and memory are reported, never asserted (docs/PRINCIPLES.md §7)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_plan_scale_quick_holds_its_checks_at_each_size() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TEPAT_")}
    proc = subprocess.run(
        [sys.executable, "-m", "bench", "plan", "--scale", "--quick", "--json"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["scenario"] == "plan-scale" and result["ok"], result
    assert sorted(result["figures"]) == ["1000_users", "2000_users"]
    for size in ("1000", "2000"):
        figures = result["figures"][f"{size}_users"]
        # about 3 reminders x 2 dates each (a DST change near the window's edge moves one)
        assert abs(figures["messages"] - int(size) * 6) < int(size) // 10
        assert figures["second_run_users_read"] == 0
        assert f"{size}: peak_rss_mb<=300" in result["goals"]
