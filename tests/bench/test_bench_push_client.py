"""``python -m bench.push_client`` at a tiny size: every notification gets its ticket from
the provider's sandbox, and the figure is there. Speed is not asserted."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.push_client import run


@pytest.mark.parametrize("provider", ["fcm", "apns"])
async def test_every_notification_gets_a_ticket(provider: str, tmp_path: Path) -> None:
    figures = await run(provider, 120, tmp_path)
    assert figures["tickets"] == figures["messages"] == 120
    assert figures["cpu_ms_per_notification"] > 0
