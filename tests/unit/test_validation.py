"""Parsing of user input: every refusal names the offending field."""

from __future__ import annotations

import json
from datetime import time

import pytest

from tepat.domain.categories import Categories, CategoryPolicy
from tepat.domain.errors import DomainError
from tepat.domain.models import PUSH_KINDS, WEEKDAYS, QuietHours
from tepat.domain.validation import (
    check_identifier,
    check_push_kind,
    check_push_token,
    format_hhmm,
    is_expo_push_token,
    parse_days,
    parse_hhmm,
    parse_quiet_hours,
)
from tepat.domain.zones import load_zone


@pytest.mark.parametrize(
    "value",
    [
        "24:00",
        "9:7",
        "09:60",
        "",
        None,
        "0900",
        " 09:00",
        "09:00 ",
        "09:00\n",  # "$" alone matches before a final newline: fullmatch is used
        "9:00",
        "09:5",
        "25:00",
        "-1:00",
        "09:00:00",
        "\uff10\uff19:\uff10\uff10",  # full-width digits
        "\u0660\u0669:\u0660\u0660",  # Arabic-Indic digits
        9,
        b"09:00",
    ],
)
def test_parse_hhmm_refuses(value: object) -> None:
    with pytest.raises(DomainError) as err:
        parse_hhmm(value, "local_time")
    assert err.value.field == "local_time"


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("00:00", time(0, 0)),
        ("23:59", time(23, 59)),
        ("09:05", time(9, 5)),
        ("12:30", time(12, 30)),
    ],
)
def test_parse_hhmm_accepts(value: str, expected: time) -> None:
    assert parse_hhmm(value, "local_time") == expected
    assert format_hhmm(expected) == value


def test_parse_hhmm_round_trips_every_minute() -> None:
    for minute in range(24 * 60):
        t = time(minute // 60, minute % 60)
        assert parse_hhmm(format_hhmm(t), "f") == t


def test_parse_days_none_is_every_day() -> None:
    assert parse_days(None) == WEEKDAYS


def test_parse_days_orders_and_dedupes() -> None:
    assert parse_days(["sun", "mon", "MON", " Wed "]) == ("mon", "wed", "sun")
    assert parse_days(["Monday", "friday"]) == ("mon", "fri")


@pytest.mark.parametrize(
    "values",
    [
        [],
        ["funday"],
        ["mon", "xyz"],
        ["monkey"],  # was accepted as "mon" (prefix match): fixed
        ["sunflower"],
        ["mo"],
        [""],
        [None],
        [1],
    ],
)
def test_parse_days_refuses(values: list[object]) -> None:
    with pytest.raises(DomainError) as err:
        parse_days(values, field="reminder.days")  # type: ignore[arg-type]
    assert err.value.field == "reminder.days"


@pytest.mark.parametrize(
    "name", ["Mars/Base", "", "../etc/passwd", "UTC ", "utc", "/usr/share/zoneinfo/UTC", "EST5EDT "]
)
def test_load_zone_refuses(name: str) -> None:
    with pytest.raises(DomainError) as err:
        load_zone(name)
    assert err.value.field == "timezone"
    with pytest.raises(DomainError) as err:
        load_zone(name, field="user.timezone")
    assert err.value.field == "user.timezone"


def test_load_zone_refuses_non_strings() -> None:
    with pytest.raises(DomainError):
        load_zone(None)  # type: ignore[arg-type]


@pytest.mark.parametrize("name", ["UTC", "Asia/Kathmandu", "America/Argentina/Buenos_Aires"])
def test_load_zone_accepts(name: str) -> None:
    assert load_zone(name).key == name


def test_categories_refuse_unknown_names() -> None:
    cats = Categories()
    with pytest.raises(DomainError) as err:
        cats.get("gossip")
    assert err.value.field == "category"
    assert "gossip" not in cats
    assert cats.get("safety").quiet_hours == "bypass"
    assert cats.queues()[0] == "tepat.safety"  # priority 0 drains first


def test_categories_need_at_least_one() -> None:
    with pytest.raises(ValueError):
        Categories([])
    assert Categories([CategoryPolicy("x", queue="q.x")]).by_queue()["q.x"].name == "x"


def test_quiet_hours_equal_start_and_end_refused() -> None:
    with pytest.raises(DomainError) as err:
        parse_quiet_hours("22:00", "22:00")
    assert err.value.field == "quiet_hours.end"


def test_quiet_hours_bad_parts_name_the_part() -> None:
    with pytest.raises(DomainError) as err:
        parse_quiet_hours("24:00", "07:00")
    assert err.value.field == "quiet_hours.start"
    with pytest.raises(DomainError) as err:
        parse_quiet_hours("22:00", "7:00")
    assert err.value.field == "quiet_hours.end"


def test_quiet_hours_wrapping_accepted() -> None:
    assert parse_quiet_hours("22:00", "07:00") == QuietHours(time(22), time(7))


@pytest.mark.parametrize(
    "token", ["ExponentPushToken[x]", "ExpoPushToken[x]", "ExponentPushToken[AbC-123_xyz]"]
)
def test_push_tokens_accepted(token: str) -> None:
    assert is_expo_push_token(token)
    assert check_push_token(token) == token


@pytest.mark.parametrize(
    "token",
    [
        "",
        "ExponentPushToken[]",
        "ExponentPushToken",
        "ExponentPushToken[x",
        "ExponentPushToken[x]\n",  # accepted by the old match-with-$: fixed
        " ExponentPushToken[x]",
        "ExponentPushToken[x] ",
        "ExponentPushToken[a b]",
        "ExponentPushToken[[x]]",
        "exponentpushtoken[x]",
        "FooPushToken[x]",
        "dGhpcyBpcyBhbiBGQ00gdG9rZW4",  # a raw FCM token
        "ExponentPushToken[" + "x" * 201 + "]",
    ],
)
def test_push_tokens_refused(token: str) -> None:
    assert not is_expo_push_token(token)
    with pytest.raises(DomainError) as err:
        check_push_token(token)
    assert err.value.field == "push_token"


def test_push_token_non_string_refused() -> None:
    with pytest.raises(DomainError):
        check_push_token(None)


WEBPUSH = {
    "endpoint": "https://fcm.googleapis.com/fcm/send/abc",
    "keys": {"p256dh": "BNc_-x", "auth": "tBH"},
}


@pytest.mark.parametrize(
    ("kind", "token"),
    [
        ("fcm", "dGhpcyBpcyBhbiBGQ00gdG9rZW4"),
        ("fcm", "cAbC1:APA91bH-x_y.z"),
        ("fcm", "x" * 4096),
        ("apns", "ab" * 32),
        ("apns", "AB" * 50),  # longer tokens may come
        ("webpush", json.dumps(WEBPUSH)),
        ("webpush", json.dumps({**WEBPUSH, "expirationTime": None})),
    ],
)
def test_push_tokens_of_each_kind_accepted(kind: str, token: str) -> None:
    assert check_push_token(token, kind) == token


@pytest.mark.parametrize(
    ("kind", "token"),
    [
        ("fcm", ""),
        ("fcm", "has space"),
        ("fcm", "x" * 4097),
        ("fcm", "ExponentPushToken[x]"),
        ("apns", "ab" * 31),  # 62: too short
        ("apns", "zz" * 32),
        ("apns", "a" * 201),
        ("webpush", "not json"),
        ("webpush", "[]"),
        ("webpush", json.dumps({**WEBPUSH, "endpoint": "http://push.example/abc"})),
        ("webpush", json.dumps({"endpoint": WEBPUSH["endpoint"]})),
        ("webpush", json.dumps({**WEBPUSH, "keys": {"p256dh": "BNc"}})),
        ("webpush", json.dumps({**WEBPUSH, "keys": {"p256dh": "a+b/", "auth": "tBH"}})),
        ("webpush", json.dumps({**WEBPUSH, "keys": {"p256dh": 12, "auth": "tBH"}})),
        ("webpush", json.dumps({**WEBPUSH, "keys": {"p256dh": "a", "auth": "tBH"}})),
    ],
)
def test_push_tokens_of_each_kind_refused(kind: str, token: str) -> None:
    with pytest.raises(DomainError) as err:
        check_push_token(token, kind)
    assert err.value.field == "push_token"


def test_every_kind_has_a_token_shape() -> None:
    for kind in PUSH_KINDS:
        with pytest.raises(DomainError):
            check_push_token("", kind)


def test_push_kinds_unknown_or_not_sendable_are_refused_naming_kind() -> None:
    assert check_push_kind("fcm", ("expo", "fcm")) == "fcm"
    for kind, sendable in (("pager", PUSH_KINDS), ("apns", ("expo",)), (None, PUSH_KINDS)):
        with pytest.raises(DomainError) as err:
            check_push_kind(kind, sendable)
        assert err.value.field == "kind"


@pytest.mark.parametrize("value", ["u1", "user@example.com", "a.b:c-d_e", "x" * 128])
def test_identifiers_accepted(value: str) -> None:
    assert check_identifier(value, "user_id") == value


@pytest.mark.parametrize("value", ["", "-x", "a/b", "a b", "x" * 129, "abc\n", "\u00e9", None])
def test_identifiers_refused(value: object) -> None:
    with pytest.raises(DomainError) as err:
        check_identifier(value, "user_id")
    assert err.value.field == "user_id"
