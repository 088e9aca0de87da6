"""One app's part failing (issue 23, tepat/processes.py ``_AppParts``): that app is closed
and opened again at the next refresh, its parts started anew; the default app's parts
and the process go on, and the process still stops cleanly. On both brokers.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from tepat.domain.apps import DEFAULT_APP
from tepat.runtime import Runtime
from tests.support.app_deployment import app_id_for, deployment
from tests.support.provider_sandboxes import BROKERS
from tests.support.waiting import eventually

pytestmark = pytest.mark.parametrize("broker", BROKERS)


async def test_a_failing_part_closes_its_app_alone_until_the_next_refresh(
    tmp_path: Path, broker: str
) -> None:
    shop = app_id_for(broker, "shop")
    starts: Counter[str] = Counter()
    stopped: Counter[str] = Counter()

    async def part(rt: Runtime, stop: asyncio.Event) -> None:
        starts[rt.app_id] += 1
        if rt.app_id == shop and starts[shop] == 1:
            raise RuntimeError("shop's part broke")
        await stop.wait()
        stopped[rt.app_id] += 1

    with capture_logs() as logs:
        async with deployment(tmp_path, broker, parts=[part]) as d:
            key = await d.create_app(shop)
            await eventually(lambda: starts[shop] == 2, what="shop reopened, its part again")
            failed = [e for e in logs if e["event"] == "app part failed; the app is closed"]
            assert [(e["app"], "shop's part broke" in e["error"]) for e in failed] == [(shop, True)]

            async def served() -> bool:
                r = await d.operator.get(f"/v1/admin/apps/{shop}")
                return bool(r.json()["served"])

            await eventually(served, what="shop served again")
            async with d.client(key) as api:
                assert (await api.get("/v1/users/ana")).status_code == 404
            assert starts[DEFAULT_APP] == 1 and stopped[DEFAULT_APP] == 0
    # Stopped as SIGTERM stops it: each part told, none left running.
    assert stopped == {DEFAULT_APP: 1, shop: 1}
    assert any(e["event"] == "stopped cleanly" for e in logs)
