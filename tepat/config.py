"""Configuration from ``TEPAT_*`` environment variables (docs/PRINCIPLES.md §5).

A bad value stops the process with one line naming the variable: see
:func:`load_settings`.
"""

from __future__ import annotations

import json
import re
from dataclasses import replace
from datetime import timedelta
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from tepat.adapters.secret_box import check_key
from tepat.domain.categories import (
    DEFAULT_CATEGORIES,
    Categories,
    CategoryPolicy,
    MaybeSentPolicy,
    QuietPolicy,
    default_maybe_sent,
)

# ConfigError lives with the domain's errors (tracing raises it too); named here as well.
from tepat.domain.errors import ConfigError as ConfigError
from tepat.domain.errors import DomainError
from tepat.domain.locales import canonical_locale
from tepat.domain.routing import (
    ALWAYS_ENABLED,
    Channel,
    EventTypes,
    default_event_types,
    parse_event_types,
)
from tepat.domain.webhooks import parse_target_policy

ENV_PREFIX = "TEPAT_"
# X-API-Key values shorter than this are guessable; the generated key has 43 characters.
MIN_ADMIN_KEY = 24
# One label of a DNS name, or an IPv4/IPv6 literal: what TEPAT_SMTP_HOST may hold.
_HOST_LABEL = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?$")
_IP_LITERAL = re.compile(r"^[0-9A-Fa-f:.]{2,45}$")
# What each setting the e-mail channel cannot do without is for (said when it is missing).
_FOR_EMAIL = {
    "smtp_from": "the sender's address",
    "public_url": "the https URL recipients reach this API at (for the unsubscribe links)",
    "unsubscribe_secret": "the key of the unsubscribe links",
}


def _blank_is_unset(v: Any) -> Any:
    return (v.strip() or None) if isinstance(v, str) else v


def _empty_is_unset(v: SecretStr | None) -> SecretStr | None:
    return v if v is not None and v.get_secret_value() else None


def _hmac_key(v: SecretStr | None) -> SecretStr | None:
    if v is not None and len(v.get_secret_value().encode()) < 32:
        raise ValueError("too short: use at least 32 bytes (e.g. openssl rand -hex 32)")
    return v


# Settings where blank means unset, made None before the checks of their own.
Text = Annotated[str | None, BeforeValidator(_blank_is_unset)]
Secret = Annotated[SecretStr | None, AfterValidator(_empty_is_unset)]
HmacKey = Annotated[SecretStr | None, AfterValidator(_empty_is_unset), AfterValidator(_hmac_key)]


class CategorySetting(BaseModel):
    # A misspelt key (quite_hours) is refused, not silently left at its default.
    model_config = ConfigDict(extra="forbid")

    quiet_hours: QuietPolicy = QuietPolicy.DEFER
    missed_window_minutes: float = Field(default=30, gt=0)
    queue: str = ""
    priority: int = 5
    # Unset: the built-in category's policy (retry for safety), else close.
    maybe_sent: MaybeSentPolicy | None = None


class Settings(BaseSettings):
    # Each field's docstring is its description: docs/hooks/reference.py builds the
    # configuration reference of the documentation site from them.
    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX, extra="ignore", use_attribute_docstrings=True
    )

    database_url: str = "sqlite:///./tepat.db"
    """The store: `sqlite:///PATH` or `mongodb://HOST:27017/DBNAME` (also `mongodb+srv://`)."""
    broker_url: str = "embedded://"
    """The broker: `embedded://` (in-process, one process only),
    `stomp://[user:pass@]host:61613` (ActiveMQ) or `stomp+ssl://[user:pass@]host:61614`
    (STOMP over TLS: the broker's certificate and host name are verified)."""
    broker_ca_file: str | None = None
    """`stomp+ssl://` only: PEM file of the CAs to trust instead of the system's (certifi's
    where the system has none), for a broker with a private CA."""
    broker_key_file: str | None = None
    """`stomp+ssl://` only: the unencrypted key of `TEPAT_BROKER_CERT_FILE`, unless the
    certificate file holds both."""
    broker_cert_file: str | None = Field(default=None, validate_default=True)
    """`stomp+ssl://` only: PEM client certificate, for a broker that asks for one."""
    expo_url: str = "https://exp.host"
    """Base URL of the Expo push API (the Expo sandbox in tests and demos)."""
    expo_access_token: SecretStr | None = None
    """Sent to Expo as a Bearer token when set."""
    expo_max_connections: int = Field(default=6, ge=1, le=64)
    """Concurrent connections to Expo, per process."""
    expo_rate_limit: float = Field(default=600, gt=0)
    """The Expo project's ceiling in notifications/s: live consumer processes share it, and
    each adapts below it to what Expo accepts."""
    critical_reserve: float = Field(default=0, ge=0, lt=1)
    """The share (0 to under 1) of each provider's rate (`TEPAT_EXPO_RATE_LIMIT`,
    `TEPAT_FCM_RATE_LIMIT`, `TEPAT_TWILIO_RATE`, `TEPAT_SMTP_RATE`) that only `critical` events
    and the `safety` category may use: other traffic gets the rest however much of it waits,
    so a flood cannot take the provider's budget from them. `0.2` keeps a fifth; `0`, the
    default, keeps none (see [Operations](../guides/operations.md#critical-reserve))."""
    fcm_credentials_file: Text = None
    """Firebase Cloud Messaging (HTTP v1): the JSON key file of a service account allowed to
    send for the project (Firebase console → Project settings → Service accounts). Unset: no
    FCM provider."""
    fcm_project_id: Text = Field(default=None, validate_default=True)
    """The Firebase project to send for; unset: the `project_id` of
    `TEPAT_FCM_CREDENTIALS_FILE`."""
    fcm_url: str = "https://fcm.googleapis.com"
    """Base URL of the FCM HTTP v1 API (the FCM sandbox in tests and demos)."""
    fcm_max_connections: int = Field(default=1000, ge=1, le=10_000)
    """Concurrent requests to FCM, per process (FCM takes one message per request), over as
    many HTTP/2 connections as they need (FCM allows 100 streams on one): 1,200 due at once
    then go in about one round trip, not twelve."""
    fcm_rate_limit: float = Field(default=10_000, gt=0)
    """The Firebase project's ceiling in messages/s (FCM's default quota is 600,000 a
    minute): live consumer processes share it, and each adapts below it to FCM's 429s."""
    apns_key_file: str | None = None
    """APNs auth key (the `.p8` file of Apple's developer account), read at start: set it
    (with the three below) to send to `apns` devices directly."""
    apns_key_id: str | None = Field(default=None, validate_default=True)
    """The auth key's Key ID (the provider token's `kid`)."""
    apns_team_id: str | None = Field(default=None, validate_default=True)
    """The Apple developer team id (the provider token's `iss`)."""
    apns_topic: str | None = Field(default=None, validate_default=True)
    """The app's bundle id (`apns-topic`)."""
    apns_url: str = "https://api.push.apple.com"
    """APNs's host; `https://api.sandbox.push.apple.com` for development builds of the app,
    the APNs sandbox's URL (`tepat sandbox apns`) in tests and demos."""
    apns_max_streams: int = Field(default=1000, ge=1, le=10_000)
    """Concurrent requests to APNs, per process, over as many HTTP/2 connections as they need
    (APNs has allowed 500-1,500 streams on one)."""
    webpush_vapid_private_key_file: str | None = None
    """Web Push: the VAPID key (RFC 8292) that signs every push, a P-256 private key as a
    PEM file (`openssl ecparam -name prime256v1 -genkey -noout | openssl pkcs8 -topk8
    -nocrypt`); its public key is the `applicationServerKey` browsers subscribe with. Set
    it (with the subject below) to send to `webpush` devices."""
    webpush_vapid_subject: str | None = Field(default=None, validate_default=True)
    """How a push service reaches the sender: a `mailto:` or `https:` URL (the VAPID `sub`)."""
    webpush_url: str | None = None
    """Unset: each notification goes to its subscription's endpoint. Set: to this base URL
    with the endpoint's path instead (the Web Push sandbox in tests and demos)."""
    webpush_max_connections: int = Field(default=50, ge=1, le=512)
    """Concurrent requests to push services, per process."""
    admin_api_key: SecretStr | None = None
    """`X-API-Key` for backends and operators. Unset: generated on first start and kept in
    `.tepat-admin-key` beside a SQLite database; required with MongoDB."""
    jwt_secret: HmacKey = None
    """HS256 secret of end-user tokens (`Authorization: Bearer`, `sub` = user id), at least 32
    bytes (RFC 7518 asks for a key as long as the hash). Unset: user tokens are refused."""
    jwt_issuer: Text = None
    """When set, every end-user token must carry this `iss` claim."""
    jwt_audience: Text = None
    """When set, every end-user token must carry this `aud` claim (a string or a list holding
    it)."""
    jwt_max_lifetime_seconds: float = Field(default=86400, gt=0, le=366 * 86400)
    """The furthest an end-user token's `exp` may lie ahead of now; a token minted for longer
    is refused (a leaked token must not stay good for years)."""
    auth_failures_per_minute: int = Field(default=10, ge=1, le=100_000)
    """Wrong `X-API-Key` values (admin or app key) and failed dashboard logins a client IP may
    send per minute; past that its key attempts get 429 with `Retry-After` until the minute
    is over. Behind a reverse proxy, the client IP is the proxy's unless uvicorn is told to
    trust `X-Forwarded-For` (see [Security](../guides/security.md))."""
    app_keys: Annotated[dict[str, SecretStr], NoDecode] = Field(default_factory=dict)
    """Per-app keys for the events API only, JSON `{"app name": "key"}` (names lower-case, keys
    at least 32 characters, distinct): a backend posts and follows events without the admin
    key."""
    allow_user_notifications: bool = False
    """`true`: an end user's token may post one-off notifications to that user
    (`POST /v1/users/{id}/notifications`). Otherwise one-offs are a backend operation (admin
    key): free text a user writes must not reach a phone through the operator's sender."""
    max_devices_per_user: int = Field(default=20, ge=1, le=10_000)
    """Active devices a user may have; registering one more is a 409 naming `device_id`."""
    max_reminders_per_user: int = Field(default=50, ge=1, le=10_000)
    """Reminders a user may have; creating one more is a 409 naming `reminder_id`."""
    receipt_delay_seconds: float = Field(default=900, ge=0)
    """How long after sending the Expo receipts are polled (10 with `serve --sandbox`)."""
    receipt_poll_interval_seconds: float = Field(default=30, gt=0)
    """How often the receipt poller pages through every ticket awaiting its receipt."""
    plan_horizon_hours: float = Field(default=48, gt=0, le=24 * 31)
    """How far ahead the creator jobs plan reminders into messages."""
    plan_interval_seconds: float = Field(default=600, gt=0)
    """How often the creator job runs."""
    sweep_interval_seconds: float = Field(default=30, gt=0)
    """How often the sweeper looks for lost or stuck messages."""
    sweep_grace_seconds: float = Field(default=120, gt=0)
    """How late past its due instant a published batch may be before the sweeper counts it lost
    and publishes it again."""
    outbox_interval_seconds: float = Field(default=1.0, gt=0)
    """How often the outbox publisher (in `scheduler` and `serve`) publishes what other
    processes stored; a write in the same process publishes at once what is due within max(5
    s, 2 x this + `TEPAT_BROKER_LEAD_SECONDS`). Messages are published in batches per
    (queue, due second): a full one (100 ids) once due within 10 minutes, the rest of a
    second once due within those few seconds."""
    apps_refresh_seconds: float = Field(default=5.0, gt=0, le=3600)
    """How often each process reads the registry of apps (`/v1/admin/apps`): an app added,
    changed or disabled, and a key made or revoked, in another process is served here
    within this time. The process that made the change serves it at once."""
    sending_lease_seconds: float = Field(default=300, gt=0)
    """After this, a message a dead consumer left in `sending` is re-driven (the embedded
    broker's next start re-drives at once: no other process can hold it). A live consumer
    renews the lease of a batch it still holds at half of it (a throttled rate)."""
    max_attempts: int = Field(default=10, ge=1)
    """Attempts before a message that keeps failing ends `failed`."""
    max_retry_age_seconds: float = Field(default=3600, gt=0)
    """How long a message is retried before it ends `failed`."""
    breaker_threshold: int = Field(default=5, ge=1, le=10_000)
    """Consecutive provider-side failures (connect errors, timeouts, 5xx; never a refused
    recipient or a 429) that open a provider's circuit breaker: it then stops calling the
    provider and its messages wait."""
    breaker_cool_down_seconds: float = Field(default=30, gt=0, le=3600)
    """How long an open breaker waits before probing its provider again."""
    breaker_half_open_probes: int = Field(default=1, ge=1, le=1000)
    """Requests let through at once to probe a provider after the cool-down: one success
    closes the breaker, one failure opens it again."""
    device_max_failures: int = Field(default=3, ge=1)
    """Consecutive failures that deactivate a device (`DeviceNotRegistered` deactivates at
    once)."""
    consumer_prefetch: int = Field(default=50, ge=1, le=10_000)
    """Unacked broker batches per consumer."""
    broker_lead_seconds: float = Field(default=1.0, ge=0, le=60)
    """Each batch is handed to the consumer this long before its instant and held there until
    the instant: ActiveMQ's scheduler firing late (~0.3 s) does not show, and on either broker
    who it goes to is read ahead, so only the claim and the send are left at the instant; `0`
    hands it over at the instant itself."""
    claim_ahead_seconds: float = Field(default=0.25, ge=0, le=5)
    """A message in the consumer's hands is claimed this long before its instant, and judged
    then (who it goes to, the send check as of the instant); it is sent at the instant, so
    the claim's write and the reads are not in the instant's path (at 1,200 due in one
    second they took ~0.15 s). Meanwhile it shows as `sending`. A change (a re-plan, a
    preference, a device) that comes after that applies from the next occurrence. `0`
    claims and judges at the instant itself."""
    # Longer than a store outage should last.
    broker_retry_age_seconds: float = Field(default=900, gt=0, le=7 * 24 * 3600)
    """A batch the consumer hands back (nack) returns after 1 s, 2 s, 4 s … at most 60 s (±20
    %); once it has been failing this long it goes to the broker's DLQ (`tepat dlq list`)."""
    log_level: str = "INFO"
    """Level of everything logged but HTTP access lines (see
    [Logs](../guides/operations.md#logs))."""
    api_docs: bool = False
    """`true`: serve the interactive API pages `/docs` (Swagger UI) and `/redoc`. They load
    their scripts from a CDN (jsDelivr), pinned to one release and integrity-checked, on
    this API's origin (the dashboard's): off unless asked for. `/openapi.json` is always
    served."""
    log_json: bool | None = None
    """`true`: one JSON object per line; `false`: readable lines. Unset: JSON when stderr is
    not a terminal."""
    access_log_level: str = "INFO"
    """Level of HTTP access lines, independent of `TEPAT_LOG_LEVEL`; probes and scrapes are
    logged at `DEBUG` (see [Logs](../guides/operations.md#logs))."""
    metrics_host: str = "127.0.0.1"
    """Where `tepat scheduler` and `tepat consumers` serve `/metrics` (`0.0.0.0` in a
    container); `api` and `serve` use their HTTP port (see
    [Metrics](../guides/operations.md#metrics))."""
    metrics_port: int = Field(default=9464, ge=0, le=65535)
    """The port of that metrics server; `0`: no metrics server."""
    metrics_refresh_seconds: float = Field(default=30, gt=0)
    """How often `tepat scheduler` (or `serve`) reads message counts and queue depths into the
    cached gauges."""
    http_header_timeout_seconds: float = Field(default=10, gt=0, le=300)
    """Seconds a client has, from a request's first byte (or from opening the connection), to
    send its request line and headers; then the connection is closed unanswered (slow or idle
    clients: see [Security](../guides/security.md#resource-limits))."""
    http_body_timeout_seconds: float = Field(default=30, gt=0, le=3600)
    """Seconds a client has, after its headers, to send the request body."""
    http_keep_alive_seconds: float = Field(default=5, gt=0, le=300)
    """Seconds an idle keep-alive connection stays open after a response."""
    http_max_connections: int = Field(default=1000, ge=1, le=1_000_000)
    """Open HTTP connections per API process; beyond it a new one is closed at once (keep it
    under the process's open-file limit, `ulimit -n`)."""
    inbox_max_streams: int = Field(default=500, ge=1, le=1_000_000)
    """Open inbox streams (`/v1/users/{id}/inbox/stream`) per API process; beyond it a new one
    is answered 503 with `Retry-After`."""
    inbox_max_streams_per_user: int = Field(default=5, ge=1, le=1000)
    """Open inbox streams of one user per API process; beyond it a new one is answered 429 with
    `Retry-After`."""
    categories: Annotated[dict[str, CategorySetting] | None, NoDecode] = None
    """JSON: `{"meal": {"quiet_hours": "defer", "missed_window_minutes": 30, "queue":
    "tepat.meal", "priority": 5, "maybe_sent": "close"}, …}`, merged over the seven defaults
    (meal, mood, hydration, sleep, activity, safety, custom): a category named here takes
    the keys given and keeps the rest; an unknown key stops the process. `maybe_sent` (`retry` or
    `close`) says whether a message whose request the provider may have accepted (read
    timeout, 5xx) is sent again or closed `failed` (`outcome_unknown`); unset, it is `retry`
    for `safety` and `close` for the rest."""
    event_types: Annotated[dict[str, Any] | None, NoDecode] = None
    """JSON: the event types, each with its category, priority and channel routes (see [Events
    and templates](../guides/events.md#event-types)). Unset: `order.paid`, `invoice.overdue`
    and `otp.requested`."""
    app_event_types: Annotated[dict[str, list[str]] | None, NoDecode] = None
    """JSON `{"app name": ["event type", …]}`: the event types each app key of
    `TEPAT_APP_KEYS` may post (a 403 naming `type` otherwise). An app not listed may post every
    configured type."""
    default_locale: str = "en"
    """The locale templates fall back to when neither the user's locale nor its language has
    one."""
    require_verified_contacts: bool = False
    """`true`: e-mail and SMS go only to contact points marked `verified`; others are skipped
    `no_contact` (see [Contacts](../guides/contacts.md))."""
    # --- e-mail over SMTP (tepat/adapters/smtp_email.py)
    smtp_host: Text = None
    """The SMTP relay's host. Unset: no e-mail channel. With it `TEPAT_SMTP_FROM`,
    `TEPAT_PUBLIC_URL` and `TEPAT_UNSUBSCRIBE_SECRET` are required (see
    [E-mail](../guides/channels/email.md))."""
    smtp_port: int | None = Field(default=None, ge=1, le=65535)
    """The relay's port. Unset: 587, 465 or 25 by `TEPAT_SMTP_TLS`."""
    smtp_tls: Literal["none", "starttls", "implicit"] = "starttls"
    """`starttls`, `implicit` (TLS from the first byte) or `none` (a relay on a private
    network). With `none` and a login, the password would cross the network in clear: see
    `TEPAT_SMTP_ALLOW_PLAINTEXT_AUTH`."""
    smtp_allow_plaintext_auth: bool = False
    """`true`: log in to the relay even with `TEPAT_SMTP_TLS=none` (the password in clear;
    only for a relay on the same host or a network you trust). Otherwise a login without TLS
    is a configuration error."""
    smtp_username: str | None = None
    """The relay's login; set both `TEPAT_SMTP_USERNAME` and `TEPAT_SMTP_PASSWORD` or neither.
    Unset: no login."""
    smtp_password: Secret = Field(default=None, validate_default=True)
    """The relay's password (with `TEPAT_SMTP_USERNAME`)."""
    smtp_from: Text = Field(default=None, validate_default=True)
    """The sender, `no-reply@shop.example` or `Shop <no-reply@shop.example>`; its domain also
    ends each `Message-ID`."""
    smtp_ca_file: str | None = None
    """PEM file of the CAs to trust for the relay instead of the system's (a relay with its own
    CA or a self-signed certificate)."""
    smtp_rate: float = Field(default=50, gt=0, le=100_000)
    """E-mails per second to the relay, shared among the consumer processes."""
    smtp_timeout: float = Field(default=30, gt=0, le=600)
    """Seconds to wait for the relay's answer to each command."""
    smtp_connections: int = Field(default=4, ge=1, le=64)
    """SMTP connections kept open to the relay, per process."""
    public_url: Text = Field(default=None, validate_default=True)
    """The URL this API is reached at from outside (`https://…`; `http://` only for localhost):
    the base of one-click unsubscribe links and of Twilio's status callbacks, and the URL
    Twilio's signatures are checked against."""
    unsubscribe_secret: HmacKey = Field(default=None, validate_default=True)
    """HMAC key of the one-click unsubscribe links (32 bytes or more, e.g. `openssl rand -hex
    32`); changing it breaks the links already sent."""
    unsubscribe_mailto: Text = None
    """An address for the `mailto:` in `List-Unsubscribe` (the token in its subject); Tepat
    does not read that mailbox."""
    unsubscribe_link_days: int = Field(default=90, ge=1, le=3650)
    """How long an unsubscribe link works, in days."""
    email_events_secret: HmacKey = None
    """HMAC-SHA256 key of `X-Tepat-Signature` for bounce, complaint and delivery events posted
    by a relay of your own (32 bytes or more). Unset: such events are refused."""
    email_events_topic_arns: str | None = None
    """Comma-separated SNS topic ARNs whose signed SES events are taken at
    `/v1/providers/email/events` (a valid SNS signature only proves SNS sent it: anyone can
    subscribe an endpoint to a topic). Unset: SNS is refused."""
    # --- SMS through Twilio (tepat/adapters/twilio_sms.py)
    twilio_account_sid: Text = None
    """The Twilio account (`AC` + 32 hex digits); set it and `TEPAT_TWILIO_AUTH_TOKEN` or
    neither. Unset: no SMS channel (see [SMS](../guides/channels/sms.md))."""
    twilio_auth_token: SecretStr | None = Field(default=None, validate_default=True)
    """The Twilio account's auth token; it also verifies Twilio's callbacks."""
    twilio_from: Text = None
    """The sender: an E.164 number, a short code or an alphanumeric sender id. This or
    `TEPAT_TWILIO_MESSAGING_SERVICE_SID` is required with the account."""
    twilio_messaging_service_sid: Text = Field(default=None, validate_default=True)
    """A Messaging Service (`MG…`) to send from, instead of `TEPAT_TWILIO_FROM`."""
    twilio_url: str = "https://api.twilio.com"
    """Base URL of Twilio's Messages API (the Twilio sandbox in tests and demos)."""
    twilio_rate: float = Field(default=10, gt=0, le=10_000)
    """SMS requests per second to Twilio, shared among the consumer processes."""
    # --- failover (docs/guides/operations.md, "Failover")
    twilio_secondary_account_sid: Text = None
    """A second Twilio account, sent through when the first fails for provider-side reasons
    (failover); set it and `TEPAT_TWILIO_SECONDARY_AUTH_TOKEN` or neither."""
    twilio_secondary_auth_token: SecretStr | None = Field(default=None, validate_default=True)
    """The second Twilio account's auth token."""
    twilio_secondary_from: Text = Field(default=None, validate_default=True)
    """The second account's sender. Unset: `TEPAT_TWILIO_FROM` (required when the first
    account sends through a Messaging Service, which belongs to it)."""
    twilio_secondary_url: str | None = None
    """Base URL of the second account's Messages API. Unset: `TEPAT_TWILIO_URL`."""
    smtp_secondary_url: Text = None
    """A second SMTP relay, `smtp://[user:password@]host[:port]`, sent through when the
    first fails for provider-side reasons (failover); TLS, sender and limits are the first
    relay's."""
    sms_max_segments: int = Field(default=3, ge=1, le=10)
    """The most segments an SMS body may take (GSM-7: 160 characters in one, 153 per part;
    UCS-2: 70, then 67); a longer one fails `too_many_segments`."""

    # --- status webhooks out (tepat/adapters/webhook_out.py)
    webhook_allow_http: bool = False
    """`true`: webhook URLs may be `http://` to any host (a private network; signatures still
    apply); otherwise `http://` only to a loopback host (see [Status
    webhooks](../guides/webhooks.md))."""
    webhook_timeout_seconds: float = Field(default=15, gt=0, le=120)
    """How long one webhook POST may take before it counts as failed and is retried."""
    webhook_allow_private_hosts: str | None = None
    """Comma-separated host names, addresses and networks (CIDR: `10.1.0.0/16`) webhooks may
    reach although they are loopback, private, link-local or otherwise internal (a receiver
    on your own network). Unset: every such URL is refused when registered and when sent
    (see [Status webhooks](../guides/webhooks.md))."""

    secrets_key: SecretStr | None = None
    """A Fernet key (`python -c "from cryptography.fernet import Fernet;
    print(Fernet.generate_key().decode())"`) that encrypts webhook signing secrets and apps'
    settings (their provider accounts: [Several apps](../guides/apps.md)) at rest, in either
    store. Unset: they are stored in clear (see [Security](../guides/security.md)).
    Secrets written before it was set keep working and are encrypted at their next rotation;
    keep the key: without it the encrypted ones cannot sign."""

    @field_validator("secrets_key")
    @classmethod
    def _secrets_key(cls, v: SecretStr | None) -> SecretStr | None:
        if v is None or not v.get_secret_value().strip():
            return None
        check_key(v.get_secret_value().strip())
        return SecretStr(v.get_secret_value().strip())

    @field_validator("database_url")
    @classmethod
    def _database_url(cls, v: str) -> str:
        if not v.startswith(("sqlite:///", "mongodb://", "mongodb+srv://")):
            raise ValueError("expected sqlite:///PATH or mongodb://HOST/DBNAME")
        return v

    @field_validator("broker_url")
    @classmethod
    def _broker_url(cls, v: str) -> str:
        if v == "embedded://":
            return v
        if not v.startswith(("stomp://", "stomp+ssl://")):
            raise ValueError(
                "expected embedded://, stomp://[user:pass@]host:61613"
                " or stomp+ssl://[user:pass@]host:61614"
            )
        from tepat.adapters.stomp.url import parse_stomp_url

        parse_stomp_url(v)
        return v

    # in field order, so each sees the URL and the key file in info.data
    @field_validator("broker_ca_file", "broker_key_file", "broker_cert_file", "smtp_ca_file")
    @classmethod
    def _tls_files(cls, v: str | None, info: ValidationInfo) -> str | None:
        from tepat.adapters.stomp import tls

        v = v or None
        url = info.data.get("broker_url")
        broker = str(info.field_name).startswith("broker_")
        if v and broker and url and not url.startswith("stomp+ssl://"):
            scheme = url.partition("://")[0]
            raise ValueError(f"only used with stomp+ssl://, and TEPAT_BROKER_URL is {scheme}://")
        if str(info.field_name).endswith("_ca_file") and v:
            tls.check_ca_file(v)
        elif info.field_name == "broker_key_file" and v:
            tls.check_readable(v)
        elif info.field_name == "broker_cert_file":
            key = info.data.get("broker_key_file")
            if v is None and key:
                raise ValueError("unset, but TEPAT_BROKER_KEY_FILE is set: set both")
            if v:
                tls.check_client_files(v, key)
        return v

    # in field order: the file is checked first, and its project is the default
    @field_validator("fcm_credentials_file", "fcm_project_id")
    @classmethod
    def _fcm_service_account(cls, v: str | None, info: ValidationInfo) -> str | None:
        from tepat.adapters.fcm_auth import read_service_account

        if info.field_name == "fcm_credentials_file":
            if v is not None:
                read_service_account(v)
            return v
        path = info.data.get("fcm_credentials_file")
        if path is None or v:
            return v
        project = read_service_account(path).project_id
        if not project:
            raise ValueError(f"unset, and {path} names no project_id: set it")
        return str(project)

    @field_validator("apns_key_file", "webpush_vapid_private_key_file")
    @classmethod
    def _p256_key_file(cls, v: str | None) -> str | None:
        from tepat.adapters.apns_auth import read_signing_key

        if v:
            read_signing_key(v)
        return v or None

    @field_validator("apns_key_id", "apns_team_id", "apns_topic")
    @classmethod
    def _apns_key_needs(cls, v: str | None, info: ValidationInfo) -> str | None:
        if info.data.get("apns_key_file") and not v:
            raise ValueError("unset, but TEPAT_APNS_KEY_FILE is set: APNs needs it")
        return v or None

    @field_validator("webpush_vapid_subject")
    @classmethod
    def _webpush_subject(cls, v: str | None, info: ValidationInfo) -> str | None:
        if v and not v.startswith(("mailto:", "https://")):
            raise ValueError("expected a mailto: or https: URL")
        if info.data.get("webpush_vapid_private_key_file") and not v:
            raise ValueError("unset, but TEPAT_WEBPUSH_VAPID_PRIVATE_KEY_FILE is set: it is needed")
        return v or None

    @field_validator(
        "expo_url", "twilio_url", "fcm_url", "apns_url", "webpush_url", "twilio_secondary_url"
    )
    @classmethod
    def _provider_url(cls, v: str | None) -> str | None:
        if v is None:
            return v
        if not v.startswith(("http://", "https://")):
            raise ValueError("expected an http(s) URL")
        return v.rstrip("/")

    @field_validator("log_level", "access_log_level")
    @classmethod
    def _log_level(cls, v: str) -> str:
        if v.upper() not in {"DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"}:
            raise ValueError("expected DEBUG, INFO, WARNING, ERROR or CRITICAL")
        return v.upper()

    @field_validator("categories", "event_types", "app_event_types", mode="before")
    @classmethod
    def _json_setting(cls, v: Any, info: ValidationInfo) -> Any:
        what = {
            "categories": "category policies",
            "event_types": "event types",
            "app_event_types": "event types per app",
        }
        return _json_text(v, what[str(info.field_name)])

    @field_validator("admin_api_key")
    @classmethod
    def _admin_api_key(cls, v: SecretStr | None) -> SecretStr | None:
        if v is not None and v.get_secret_value() and len(v.get_secret_value()) < MIN_ADMIN_KEY:
            raise ValueError(
                f"too short: use at least {MIN_ADMIN_KEY} characters (e.g. openssl rand -hex 32)"
            )
        return v

    @field_validator("app_keys", mode="before")
    @classmethod
    def _app_keys(cls, v: Any) -> Any:
        v = _json_text(v, "app keys") if v is not None else {}
        if not isinstance(v, dict):
            raise ValueError('expected a JSON object {"app name": "key"}')
        for name, key in v.items():
            if not re.fullmatch(r"[a-z][a-z0-9_-]{0,63}", str(name)):
                raise ValueError(f"{name!r}: app names are lower-case letters, digits, _ and -")
            if not isinstance(key, str) or len(key) < 32:
                raise ValueError(f"{name}: a key of at least 32 characters is needed")
        if len(set(v.values())) != len(v):
            raise ValueError("two apps share one key")
        return v

    @field_validator("app_event_types")
    @classmethod
    def _app_event_types(
        cls, v: dict[str, list[str]] | None, info: ValidationInfo
    ) -> dict[str, list[str]] | None:
        apps = info.data.get("app_keys", {})
        for name in v or {}:
            if name not in apps:
                raise ValueError(f"{name!r}: not an app of TEPAT_APP_KEYS")
        return v

    @model_validator(mode="after")
    def _event_types_route(self) -> Settings:
        # Once every setting is read: a route may name e-mail or SMS only when its provider
        # is configured, and an app may post only configured types.
        try:
            known = set(self.event_routing().names)
        except DomainError as e:
            # A model-level error has no field location: the variable is named here.
            where = f"{e.field}: " if e.field else ""
            raise ValueError(f"{ENV_PREFIX}EVENT_TYPES: {where}{e.message}") from None
        for app, types in (self.app_event_types or {}).items():
            for name in types:
                if name not in known:
                    raise ValueError(
                        f"{ENV_PREFIX}APP_EVENT_TYPES: {app}: {name!r} is not a configured event"
                        " type (TEPAT_EVENT_TYPES)"
                    )
        return self

    @field_validator("default_locale")
    @classmethod
    def _default_locale(cls, v: str) -> str:
        try:
            return canonical_locale(v)
        except DomainError as e:
            raise ValueError(e.message) from None

    @field_validator("smtp_host")
    @classmethod
    def _smtp_host(cls, v: str | None) -> str | None:
        if v is not None and not _is_host(v):
            raise ValueError("expected a host name or IP address, without scheme or port")
        return v

    @field_validator("smtp_secondary_url")
    @classmethod
    def _smtp_secondary_url(cls, v: str | None) -> str | None:
        if v is not None:
            url = urlsplit(v)
            if url.scheme != "smtp" or not _is_host(url.hostname or ""):
                raise ValueError("expected smtp://[user:password@]host[:port]")
            _ = url.port  # a port out of range raises here
        return v

    @field_validator("smtp_password")
    @classmethod
    def _smtp_password(cls, v: SecretStr | None, info: ValidationInfo) -> SecretStr | None:
        _both_or_neither(
            info.data.get("smtp_username") or None, v, "SMTP_USERNAME", "SMTP_PASSWORD"
        )
        if (
            v is not None
            and info.data.get("smtp_tls") == "none"
            and not info.data.get("smtp_allow_plaintext_auth")
        ):
            raise ValueError(
                "would be sent in clear with TEPAT_SMTP_TLS=none: use starttls or implicit,"
                " or set TEPAT_SMTP_ALLOW_PLAINTEXT_AUTH=true"
            )
        return v

    @field_validator("smtp_from", "public_url", "unsubscribe_secret")
    @classmethod
    def _needed_for_email(cls, v: Any, info: ValidationInfo) -> Any:
        if v is None and info.data.get("smtp_host"):
            raise ValueError(f"required with TEPAT_SMTP_HOST: {_FOR_EMAIL[str(info.field_name)]}")
        return v

    # Values another module reads: checked by it when set (a ValueError saying what is wrong).
    @field_validator("smtp_from", "unsubscribe_mailto", "webhook_allow_private_hosts")
    @classmethod
    def _read_elsewhere(cls, v: str | None, info: ValidationInfo) -> str | None:
        from tepat.adapters.smtp_message import check_mailto, parse_from

        reader = {
            "smtp_from": parse_from,
            "unsubscribe_mailto": check_mailto,
            "webhook_allow_private_hosts": parse_target_policy,
        }[str(info.field_name)]
        if v is not None:
            reader(v)
        return v

    @field_validator("public_url")
    @classmethod
    def _public_url(cls, v: str | None) -> str | None:
        from tepat.services.unsubscribe import check_public_url

        v = (v or "").rstrip("/") or None
        if v is not None:
            check_public_url(v)
        return v

    @field_validator("email_events_topic_arns")
    @classmethod
    def _email_events_topic_arns(cls, v: str | None) -> str | None:
        from tepat.domain.sns import check_topic_arn

        arns = [a.strip() for a in (v or "").split(",") if a.strip()]
        for arn in arns:
            check_topic_arn(arn)
        return ",".join(arns) or None

    @field_validator("twilio_account_sid", "twilio_secondary_account_sid")
    @classmethod
    def _twilio_account_sid(cls, v: str | None) -> str | None:
        if v is not None and not re.fullmatch(r"AC[0-9a-fA-F]{32}", v):
            raise ValueError("expected a Twilio account SID: AC followed by 32 hex digits")
        return v

    @field_validator("twilio_auth_token", "twilio_secondary_auth_token")
    @classmethod
    def _twilio_auth_token(cls, v: SecretStr | None, info: ValidationInfo) -> SecretStr | None:
        if v is not None and not v.get_secret_value().strip():
            v = None
        token = str(info.field_name)
        sid = token.replace("auth_token", "account_sid")
        _both_or_neither(info.data.get(sid), v, sid.upper(), token.upper())
        return v

    @field_validator("twilio_from", "twilio_secondary_from")
    @classmethod
    def _twilio_from(cls, v: str | None, info: ValidationInfo) -> str | None:
        if v is not None and not _is_sms_sender(v):
            raise ValueError(
                "expected an E.164 number (+14155550100), a short code (digits) or an"
                " alphanumeric sender id (at most 11 letters and digits)"
            )
        if (
            info.field_name == "twilio_secondary_from"
            and v is None
            and info.data.get("twilio_account_sid") is not None
            and info.data.get("twilio_secondary_account_sid") is not None
            and info.data.get("twilio_from") is None
        ):
            # The first account's Messaging Service cannot send for the second one.
            raise ValueError("needed with the second account (TEPAT_TWILIO_FROM is unset)")
        return v

    @field_validator("twilio_messaging_service_sid")
    @classmethod
    def _twilio_service(cls, v: str | None, info: ValidationInfo) -> str | None:
        if v is not None and not re.fullmatch(r"MG[0-9a-fA-F]{32}", v):
            raise ValueError("expected a Messaging Service SID: MG followed by 32 hex digits")
        if (
            info.data.get("twilio_account_sid") is not None
            and v is None
            and info.data.get("twilio_from") is None
        ):
            raise ValueError(
                "TEPAT_TWILIO_ACCOUNT_SID is set: set TEPAT_TWILIO_FROM (the sending"
                " number or sender id) or TEPAT_TWILIO_MESSAGING_SERVICE_SID"
            )
        return v

    def category_policies(self) -> Categories:
        """The seven defaults with ``TEPAT_CATEGORIES`` merged over them: a category named
        there takes the keys given and keeps the rest of its built-in policy (or the general
        defaults, for a new category); the categories it does not name stay as they are."""
        policies = {p.name: p for p in DEFAULT_CATEGORIES}
        for name, c in (self.categories or {}).items():
            base = policies.get(name) or CategoryPolicy(name, maybe_sent=default_maybe_sent(name))
            given = c.model_dump(
                exclude_unset=True, exclude_none=True, exclude={"missed_window_minutes"}
            )
            if "missed_window_minutes" in c.model_fields_set:
                given["missed_window"] = timedelta(minutes=c.missed_window_minutes)
            policies[name] = replace(base, **given)
        return Categories(policies.values())

    def event_routing(self) -> EventTypes:
        """The configured event types; the defaults (tepat/domain/routing.py) when
        ``TEPAT_EVENT_TYPES`` is unset."""
        categories = self.category_policies()
        if self.event_types is None:
            return default_event_types(categories)
        return parse_event_types(self.event_types, categories, self.enabled_channels())

    def enabled_channels(self) -> frozenset[Channel]:
        """The channels a route may name: push and inbox, e-mail and SMS once their
        provider is configured."""
        on = set(ALWAYS_ENABLED)
        if self.smtp_host:
            on.add(Channel.EMAIL)
        if self.twilio_account_sid:
            on.add(Channel.SMS)
        return frozenset(on)


def load_settings(**overrides: Any) -> Settings:
    """Settings from the environment, or :class:`ConfigError` naming the first bad variable."""
    try:
        return Settings(**overrides)
    except ValidationError as e:
        err = e.errors()[0]
        # pydantic's "Value error, " prefix says nothing to an operator
        message = str(err["msg"]).removeprefix("Value error, ")
        loc = [str(p) for p in err["loc"]]
        # Inside a structured variable, say where: TEPAT_CATEGORIES: safety.maybe_sent: ...
        # A check across settings has no location: its message names its variable itself.
        where = [ENV_PREFIX + loc[0].upper(), ".".join(loc[1:])] if loc else []
        parts = [p for p in (*where, message) if p]
        raise ConfigError("tepat: bad configuration: " + ": ".join(parts)) from None


def _is_sms_sender(v: str) -> bool:
    """An E.164 number, a short code, or an alphanumeric sender id (Twilio's From)."""
    if v.startswith("+"):
        return re.fullmatch(r"\+[1-9][0-9]{6,14}", v) is not None
    if v.isdigit():
        return 3 <= len(v) <= 8
    return re.fullmatch(r"[A-Za-z0-9 ]{1,11}", v) is not None and any(c.isalpha() for c in v)


def _both_or_neither(first: object, second: object, *names: str) -> None:
    if (first is None) != (second is None):
        raise ValueError(f"set both {ENV_PREFIX}{names[0]} and {ENV_PREFIX}{names[1]}, or neither")


def _is_host(v: str) -> bool:
    if _IP_LITERAL.fullmatch(v):
        return True
    labels = v.removesuffix(".").split(".")
    return len(v) <= 253 and all(_HOST_LABEL.fullmatch(label) for label in labels)


def _json_text(v: Any, what: str) -> Any:
    """A JSON-valued setting arrives from the environment as text (NoDecode: parsed
    here, so a syntax error names the setting in one line)."""
    if isinstance(v, str):
        try:
            return json.loads(v)
        except json.JSONDecodeError as e:
            raise ValueError(f"expected a JSON object of {what} ({e.msg})") from e
    return v
