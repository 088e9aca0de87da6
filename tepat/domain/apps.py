"""Apps: the tenants of one deployment (issue 23).

Each app's records live in a store of their own and its messages on broker queues of
their own, so one app's ids never meet another's and a credential scoped to one app has
no path to another's data (docs/guides/apps.md). The default app is the deployment as it
was before apps, so an existing deployment upgrades in place.

Keys are stored as their SHA-256 only: a key is shown once, when it is made.
"""

from __future__ import annotations

import hashlib
import re
import secrets
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

DEFAULT_APP = "default"
# Lower-case, starting with a letter: an app id becomes part of a file name, a MongoDB
# database name and a broker queue name, each with its own alphabet.
APP_ID_PATTERN = r"^[a-z][a-z0-9-]{0,30}$"
_APP_ID = re.compile(APP_ID_PATTERN)
KEY_PREFIX = "tpk_"
# The public paths of an app other than the default one (unsubscribe links, provider
# callbacks) start with this and its id: /apps/<id>/u/<token>.
APP_PATH_PREFIX = "/apps/"
KeyRole = Literal["admin", "events"]
KEY_ROLES: tuple[KeyRole, ...] = ("admin", "events")
MAX_KEYS_PER_APP = 20
MAX_APPS = 100

# The settings an app holds for itself and never takes from the deployment: its accounts
# and secrets. Unset for an app, they are unset (no JWT for its users, Expo without an
# access token, no SMS or e-mail account).
APP_OWN_SETTINGS: frozenset[str] = frozenset(
    {
        "expo_access_token",
        *("fcm_credentials_file", "fcm_project_id"),
        *("apns_key_file", "apns_key_id", "apns_team_id", "apns_topic"),
        *("webpush_vapid_private_key_file", "webpush_vapid_subject"),
        *("twilio_account_sid", "twilio_auth_token", "twilio_from"),
        "twilio_messaging_service_sid",
        *("twilio_secondary_account_sid", "twilio_secondary_auth_token"),
        "twilio_secondary_from",
        *("smtp_host", "smtp_from", "smtp_username", "smtp_password", "smtp_secondary_url"),
        *("email_events_secret", "email_events_topic_arns"),
        *("jwt_secret", "jwt_issuer", "jwt_audience"),
    }
)
# Every setting an app may hold: its own, and the endpoints, ceilings and rules that are
# the deployment's until it sets them (tepat/tenancy.py). Every other is the deployment's.
APP_SETTINGS: frozenset[str] = APP_OWN_SETTINGS | {
    *("expo_url", "fcm_url", "apns_url", "twilio_url"),
    *("expo_rate_limit", "fcm_rate_limit", "twilio_rate", "smtp_rate", "smtp_port"),
    *("unsubscribe_secret", "categories", "event_types", "critical_reserve"),
}


def valid_app_id(app_id: str) -> bool:
    # fullmatch: with match, the pattern's `$` also matches before a trailing newline.
    return bool(_APP_ID.fullmatch(app_id))


def unknown_app_settings(settings: dict[str, Any]) -> list[str]:
    """The names in ``settings`` an app may not set, sorted."""
    return sorted(set(settings) - APP_SETTINGS)


@dataclass(frozen=True, slots=True)
class App:
    app_id: str
    name: str
    created_at: datetime
    # Overrides of the deployment's settings (names in APP_SETTINGS), as given: secrets
    # in clear here, sealed at rest by the store (TEPAT_SECRETS_KEY).
    settings: dict[str, Any] = field(default_factory=dict)
    # Bumped by every change: a process holding the app reopens it when it differs.
    version: int = 1
    disabled: bool = False


@dataclass(frozen=True, slots=True)
class AppKey:
    key_id: str  # shown in listings, used to revoke; not the key
    key_hash: str  # SHA-256 hex of the key
    app_id: str
    role: KeyRole
    created_at: datetime
    # An events key posts under this name (its events' ids are ``<poster>:<id>``) and
    # only these event types (None: every type the app configures).
    poster: str | None = None
    event_types: frozenset[str] | None = None
    revoked_at: datetime | None = None

    @property
    def active(self) -> bool:
        return self.revoked_at is None


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def new_key() -> tuple[str, str, str]:
    """A new key: (key, its id, its hash)."""
    key = KEY_PREFIX + secrets.token_urlsafe(32)
    return key, secrets.token_hex(6), hash_key(key)
