"""``python -m bench email|sms --quick``: the harness works and its correctness checks hold.

Speed is reported by the benchmark, never asserted here (docs/PRINCIPLES.md §7); only
that it prints its JSON line and that every message was sent once, none lost.
"""

from __future__ import annotations

import pytest

from tests.bench.running import bench_result


@pytest.mark.parametrize(
    ("channel", "messages", "refusals", "extra"),
    [
        ("email", 100, "relay_refusals", {"distinct_message_ids": 100}),
        ("sms", 40, "twilio_429s", {}),
    ],
)
def test_quick_channel_burst_holds_its_checks(
    channel: str, messages: int, refusals: str, extra: dict[str, int]
) -> None:
    result = bench_result("bench", channel, "--quick", "--json")
    assert result["scenario"] == channel and result["ok"], result
    assert result["correctness"]["sent"] == result["parameters"]["messages"] == messages
    assert result["correctness"]["duplicates"] == 0 and result["correctness"]["lost"] == 0
    for detail, value in extra.items():
        assert result["correctness"][detail] == value
    assert result["checks"] == {"every_message_sent": True}
    for figure in ("drain_seconds", "ideal_seconds", refusals, "worst_second_after_burst"):
        assert figure in result["figures"]
