"""A push's priority and time to live, from its message and category (push_terms)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from tepat.domain.categories import Categories, CategoryPolicy
from tepat.domain.models import User
from tepat.domain.push_terms import PushTerms, push_terms
from tepat.domain.sendcheck import Missed, decide
from tests.support.messages import AT, make_message

CATEGORIES = Categories()
WINDOW = timedelta(minutes=30)


@pytest.mark.parametrize(
    ("category", "priority", "expected"),
    [
        ("meal", None, "high"),  # a reminder has its moment
        ("meal", "critical", "high"),
        ("meal", "bulk", "normal"),  # no moment to hit: the device may save power
        ("safety", "bulk", "high"),  # a category that breaks quiet hours is never held back
    ],
)
def test_only_bulk_in_a_category_that_keeps_quiet_hours_is_normal(
    category: str, priority: str | None, expected: str
) -> None:
    m = make_message("k", category=category, priority=priority)
    assert push_terms(m, CATEGORIES.get(category), AT).priority == expected


def test_the_time_to_live_is_what_is_left_of_the_missed_window() -> None:
    m = make_message("k")
    meal = CATEGORIES.get("meal")
    assert meal.missed_window == WINDOW
    assert push_terms(m, meal, AT) == PushTerms("high", 1800)
    assert push_terms(m, meal, AT + timedelta(minutes=10, seconds=0.5)).ttl_seconds == 1199
    short = CategoryPolicy("nudge", missed_window=timedelta(minutes=2))
    assert push_terms(m, short, AT - timedelta(minutes=1)).ttl_seconds == 180
    # At the window's end it is now or never; past it the send would have been missed.
    assert push_terms(m, meal, AT + WINDOW).ttl_seconds == 0
    late = AT + WINDOW + timedelta(seconds=1)
    assert push_terms(m, meal, late).ttl_seconds == 0
    user = User("u1", "UTC")
    assert isinstance(decide(m, user, None, {}, 1, meal, late), Missed)
    assert not isinstance(decide(m, user, None, {}, 1, meal, AT + WINDOW), Missed)
