"""The census's check fails a run that does not exercise daily reminders, or nothing."""

from __future__ import annotations

from datetime import UTC, datetime, time

import pytest

from tests.model.census import DAILY, JUDGED_FROM, Census
from tests.model.reference import Expectation, Key, Model

NOW = datetime(2027, 3, 14, 7, 0, tzinfo=UTC)


def model_with(*keys: Key) -> Model:
    model = Model(NOW)
    for key in keys:
        model.expectations[key] = Expectation(
            key, "meal", "body", NOW, None, tz="America/New_York", local_at=time(2, 30)
        )
    return model


def test_a_run_without_examples_or_expectations_fails() -> None:
    with pytest.raises(AssertionError):
        Census().check()
    census = Census()
    for _ in range(JUDGED_FROM):
        census.take(model_with())
    with pytest.raises(AssertionError):
        census.check()


def test_daily_reminders_under_a_third_fail_the_run() -> None:
    census = Census()
    for _ in range(JUDGED_FROM - 1):
        census.take(model_with(("o", "ana", "k1")))
    census.check()  # too few examples to judge
    census.take(
        model_with(
            ("r", "ana", "r1", "2027-03-14"),
            ("o", "ana", "k1"),
            ("o", "ana", "k2"),
            ("e", "ana", "ev1", "push"),
        )
    )
    with pytest.raises(AssertionError, match="less than 33%"):
        census.check()


def test_a_third_passes_and_the_report_names_what_they_met() -> None:
    census = Census()
    census.take(
        model_with(
            ("r", "ana", "r1", "2027-03-14"), ("o", "ana", "k1"), ("e", "ana", "ev1", "push")
        )
    )
    census.check()
    assert census.kinds[DAILY] == 1
    report = "\n".join(census.report("run"))
    assert "local time in a gap" in report
    assert "on a day the zone changes its offset" in report
