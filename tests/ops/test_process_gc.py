"""A process freezes what it built before its parts start (tepat/processes.py run_parts):
a full collection then scans only what the parts allocate, not the modules and the
runtime, which cost every send in hand a 30-65 ms stall each time it ran."""

from __future__ import annotations

import asyncio
import gc
from pathlib import Path

from tepat.processes import run_parts
from tepat.runtime import Runtime
from tests.api.conftest import make_settings


async def test_what_a_process_built_before_its_parts_is_frozen(tmp_path: Path) -> None:
    seen: list[int] = []

    async def part(rt: Runtime, stop: asyncio.Event) -> None:
        seen.append(gc.get_freeze_count())

    gc.unfreeze()
    try:
        await run_parts(make_settings(tmp_path), [part])
    finally:
        gc.unfreeze()  # the test process's objects are the collector's again
    # Every object alive then: the modules alone are tens of thousands.
    assert seen and seen[0] > 10_000
