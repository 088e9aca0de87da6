"""An app's settings and names (tepat/tenancy.py): its store and queues beside the default
app's, its accounts and secrets never the deployment's, its values checked by the settings
model with the field named."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from pydantic import SecretStr

from tepat.config import Settings
from tepat.domain.apps import App
from tepat.domain.errors import DomainError
from tepat.tenancy import app_database_url, app_settings, queue_namespace, settings_check

DEPLOYMENT = Settings(
    database_url="sqlite:///data/tepat.db",
    jwt_secret=SecretStr("deployment-jwt-secret-0123456789abcdef0123"),
    expo_access_token=SecretStr("deployment-expo-token"),
    expo_rate_limit=600,
    twilio_account_sid="AC" + "1" * 32,
    twilio_auth_token=SecretStr("t" * 32),
    twilio_from="+15550000000",
    public_url="https://push.example.com",
    unsubscribe_secret=SecretStr("u" * 40),
)


def _app(**settings: object) -> App:
    return App(
        app_id="shop", name="Shop", created_at=datetime(2027, 1, 1, tzinfo=UTC), settings=settings
    )


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("sqlite:///data/tepat.db", "sqlite:///data/tepat.app-shop.db"),
        ("sqlite:///./tepat.db", "sqlite:///./tepat.app-shop.db"),
        ("sqlite:///data.d/tepat", "sqlite:///data.d/tepat.app-shop"),
        ("sqlite:///:memory:", "sqlite:///:memory:"),
        (
            "mongodb://db:27017/tepat?replicaSet=rs0",
            "mongodb://db:27017/tepat-app-shop?replicaSet=rs0",
        ),
        ("mongodb://db:27017", "mongodb://db:27017/tepat-app-shop"),
    ],
)
def test_an_apps_store_sits_beside_the_default_one(url: str, expected: str) -> None:
    assert app_database_url(url, "shop") == expected


def test_the_default_app_keeps_its_queue_names() -> None:
    assert queue_namespace("default") == ""
    assert queue_namespace("shop") == "app.shop."


def test_an_app_never_takes_the_deployments_accounts_or_secrets() -> None:
    s = app_settings(DEPLOYMENT, _app())
    assert s.database_url == "sqlite:///data/tepat.app-shop.db"
    assert s.jwt_secret is None
    assert s.expo_access_token is None
    assert s.twilio_account_sid is None and s.twilio_auth_token is None
    # ceilings and endpoints are the deployment's until the app sets its own
    assert s.expo_rate_limit == 600
    assert s.public_url == "https://push.example.com/apps/shop"
    # its links are signed with a key of its own
    assert s.unsubscribe_secret is not None and DEPLOYMENT.unsubscribe_secret is not None
    assert (
        s.unsubscribe_secret.get_secret_value() != DEPLOYMENT.unsubscribe_secret.get_secret_value()
    )


def test_an_apps_own_values_win() -> None:
    s = app_settings(DEPLOYMENT, _app(expo_access_token="shop-token", expo_rate_limit=50))
    assert s.expo_access_token is not None
    assert s.expo_access_token.get_secret_value() == "shop-token"
    assert s.expo_rate_limit == 50


@pytest.mark.parametrize(
    ("settings", "field"),
    [
        ({"expo_rate_limit": -1}, "settings.expo_rate_limit"),
        ({"categories": "not json"}, "settings.categories"),
        ({"critical_reserve": 2}, "settings.critical_reserve"),
    ],
)
def test_a_bad_value_is_refused_naming_it(settings: dict[str, object], field: str) -> None:
    with pytest.raises(DomainError) as e:
        settings_check(DEPLOYMENT)(settings)
    assert e.value.field == field
