"""Per (category, channel) preferences (tepat/domain/preferences.py) and the send-time check."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tepat.domain.errors import DomainError
from tepat.domain.models import SkipReason
from tepat.domain.preferences import allowed, check_key, view
from tepat.domain.sendcheck import Send, Skip, decide
from tests.unit.test_sendcheck import MEAL, MESSAGE, REMINDER, USER

CATEGORIES = ["meal", "mood", "team.news"]  # a configured name may hold a dot


@pytest.mark.parametrize(
    ("prefs", "channel", "expected"),
    [
        ({}, "email", True),  # nothing set: on
        ({"meal": False}, "email", False),  # the category key covers every channel
        ({"meal": False}, "push", False),
        ({"meal": False, "meal.inbox": True}, "inbox", True),  # the channel key wins
        ({"meal": False, "meal.inbox": True}, "push", False),
        ({"meal.email": False}, "email", False),
        ({"meal.email": False}, "sms", True),  # another channel is untouched
        ({"meal": True, "meal.sms": False}, "sms", False),
        ({"mood": False}, "push", True),  # another category is untouched
    ],
)
def test_the_channel_key_wins_then_the_category_key_then_on(
    prefs: dict[str, bool], channel: str, expected: bool
) -> None:
    assert allowed(prefs, "meal", channel) is expected


def test_keys_name_a_known_category_and_channel() -> None:
    assert check_key("meal", CATEGORIES, "f") == "meal"
    assert check_key("meal.email", CATEGORIES, "f") == "meal.email"
    assert check_key("team.news", CATEGORIES, "f") == "team.news"
    assert check_key("team.news.sms", CATEGORIES, "f") == "team.news.sms"
    with pytest.raises(DomainError, match="unknown channel 'fax'") as e:
        check_key("meal.fax", CATEGORIES, "categories.meal.fax")
    assert e.value.field == "categories.meal.fax"
    with pytest.raises(DomainError, match="unknown category 'gossip'"):
        check_key("gossip", CATEGORIES, "f")
    with pytest.raises(DomainError, match="unknown category 'gossip'"):
        check_key("gossip.email", CATEGORIES, "f")
    with pytest.raises(DomainError, match="unknown category"):
        check_key(".email", CATEGORIES, "f")


def test_the_view_lists_every_category_then_the_channel_keys_set() -> None:
    stored = {"mood": False, "meal.email": False, "gone.email": False, "meal.fax": True}
    assert view(stored, CATEGORIES) == {
        "meal": True,
        "mood": False,
        "team.news": True,
        "meal.email": False,  # kept; a removed category's or unknown channel's are not
    }


def test_a_push_message_honours_its_channel_key_at_send_time() -> None:
    def run(prefs: dict[str, bool], channel: str = "push") -> object:
        message = replace(MESSAGE, channel=channel)
        return decide(message, USER, REMINDER, prefs, 1, MEAL, MESSAGE.scheduled_at)

    assert run({"meal.push": False}) == Skip(SkipReason.OPTED_OUT)
    assert run({"meal": False}) == Skip(SkipReason.OPTED_OUT)
    assert run({"meal": False, "meal.push": True}) == Send()
    assert run({"meal.email": False}) == Send()  # another channel's switch
    assert run({"meal.email": False}, channel="email") == Skip(SkipReason.OPTED_OUT)
