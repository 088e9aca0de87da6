"""TEPAT_CATEGORIES: merged over the seven defaults, and a misspelt key refused (issue 19 #9)."""

from __future__ import annotations

import json

import pytest

from tepat.config import ConfigError, load_settings
from tepat.domain.categories import DEFAULT_CATEGORIES, QuietPolicy


def test_a_value_naming_one_category_keeps_the_other_six(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TEPAT_CATEGORIES", json.dumps({"meal": {"missed_window_minutes": 10}}))
    categories = load_settings().category_policies()
    assert categories.names == [p.name for p in DEFAULT_CATEGORIES]
    assert categories.get("meal").missed_window.total_seconds() == 600


def test_a_named_default_keeps_the_keys_it_does_not_give(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TEPAT_CATEGORIES", json.dumps({"safety": {"priority": 3}, "billing": {}}))
    categories = load_settings().category_policies()
    safety = categories.get("safety")
    assert (safety.priority, safety.quiet_hours) == (3, QuietPolicy.BYPASS)
    assert "billing" in categories and len(categories.names) == len(DEFAULT_CATEGORIES) + 1


def test_an_unknown_key_stops_the_process_with_one_line_naming_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TEPAT_CATEGORIES", json.dumps({"meal": {"quite_hours": "send"}}))
    with pytest.raises(ConfigError) as e:
        load_settings()
    message = str(e.value)
    assert message.startswith("tepat: bad configuration: TEPAT_CATEGORIES: meal.quite_hours")
    assert "\n" not in message
