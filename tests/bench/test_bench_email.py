"""``python -m bench.email --quick``: the harness works and its correctness checks hold.

Speed is reported by the benchmark, never asserted here (docs/PRINCIPLES.md §7); only
that it prints its JSON line and that every e-mail was sent once, none lost.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_quick_email_bench_holds_its_checks() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TEPAT_")}
    proc = subprocess.run(
        [sys.executable, "-m", "bench.email", "--quick", "--json"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["scenario"] == "email" and result["ok"], result
    assert result["correctness"]["sent"] == result["parameters"]["messages"] == 100
    assert result["correctness"]["duplicates"] == 0 and result["correctness"]["lost"] == 0
    assert result["correctness"]["distinct_message_ids"] == 100
    assert result["checks"] == {"every_message_sent": True}
    for figure in ("drain_seconds", "ideal_seconds", "relay_refusals", "worst_second_after_burst"):
        assert figure in result["figures"]
