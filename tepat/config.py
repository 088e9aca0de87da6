"""Configuration from ``TEPAT_*`` environment variables (docs/PRINCIPLES.md §5).

A bad value stops the process with one line naming the variable: see
:func:`load_settings`.
"""

from __future__ import annotations

import json
import re
from datetime import timedelta
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    Field,
    SecretStr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from tepat.domain.categories import (
    DEFAULT_CATEGORIES,
    Categories,
    CategoryPolicy,
    MaybeSentPolicy,
    QuietPolicy,
    default_maybe_sent,
)
from tepat.domain.errors import DomainError
from tepat.domain.locales import canonical_locale
from tepat.domain.routing import (
    ALWAYS_ENABLED,
    ENABLED_CHANNELS,
    Channel,
    EventTypes,
    default_event_types,
    parse_event_types,
)

ENV_PREFIX = "TEPAT_"
# One label of a DNS name, or an IPv4/IPv6 literal: what TEPAT_SMTP_HOST may hold.
_HOST_LABEL = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?$")
_IP_LITERAL = re.compile(r"^[0-9A-Fa-f:.]{2,45}$")


class CategorySetting(BaseModel):
    quiet_hours: QuietPolicy = QuietPolicy.DEFER
    missed_window_minutes: float = Field(default=30, gt=0)
    queue: str = ""
    priority: int = 5
    # Unset: the built-in category's policy (retry for safety), else close.
    maybe_sent: MaybeSentPolicy | None = None


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="ignore")

    database_url: str = "sqlite:///./tepat.db"
    broker_url: str = "embedded://"
    # stomp+ssl:// only, PEM files: the CAs to trust instead of the system's, and a
    # client certificate (its key in the same file or in the key file) if the broker asks.
    broker_ca_file: str | None = None
    broker_key_file: str | None = None
    broker_cert_file: str | None = Field(default=None, validate_default=True)
    expo_url: str = "https://exp.host"
    expo_access_token: SecretStr | None = None
    expo_max_connections: int = Field(default=6, ge=1, le=64)
    expo_rate_limit: float = Field(default=600, gt=0, description="notifications/s per credential")
    admin_api_key: SecretStr | None = None
    jwt_secret: SecretStr | None = None
    # Per-app keys for the events API only ({"billing": "<key>", ...}): a backend posts
    # and follows events without the admin key. JSON; each key at least 32 characters.
    app_keys: Annotated[dict[str, SecretStr], NoDecode] = Field(default_factory=dict)
    receipt_delay_seconds: float = Field(default=900, ge=0)
    receipt_poll_interval_seconds: float = Field(default=30, gt=0)
    plan_horizon_hours: float = Field(default=48, gt=0, le=24 * 31)
    plan_interval_seconds: float = Field(default=600, gt=0)
    sweep_interval_seconds: float = Field(default=30, gt=0)
    # How late past its due instant a published batch may be before the sweeper
    # counts it as lost and publishes it again.
    sweep_grace_seconds: float = Field(default=120, gt=0)
    # The outbox publisher's pass interval (a write in the same process publishes at once
    # only what is due before this loop could: see tepat/services/outbox.py).
    outbox_interval_seconds: float = Field(default=1.0, gt=0)
    sending_lease_seconds: float = Field(default=300, gt=0)
    max_attempts: int = Field(default=10, ge=1)
    max_retry_age_seconds: float = Field(default=3600, gt=0)
    device_max_failures: int = Field(default=3, ge=1)
    consumer_prefetch: int = Field(default=50, ge=1, le=10_000)
    # ActiveMQ: publish each batch this long before its instant and let the consumer
    # hold it until the exact instant, so the broker's scheduler firing late (~0.3 s)
    # does not show. 0: publish for the instant itself.
    broker_lead_seconds: float = Field(default=1.0, ge=0, le=60)
    # How long the broker hands a failing batch back (with growing delays) before
    # dead-lettering it: longer than a store outage should last.
    broker_retry_age_seconds: float = Field(default=900, gt=0, le=7 * 24 * 3600)
    log_level: str = "INFO"
    log_json: bool | None = None  # None: JSON when stderr is not a terminal
    # HTTP access lines (uvicorn.access), independent of log_level; probes are DEBUG.
    access_log_level: str = "INFO"
    # /metrics of `tepat scheduler` and `tepat consumers` (api and serve use their HTTP port).
    metrics_host: str = "127.0.0.1"
    metrics_port: int = Field(default=9464, ge=0, le=65535, description="0: no metrics server")
    metrics_refresh_seconds: float = Field(default=30, gt=0)
    categories: Annotated[dict[str, CategorySetting] | None, NoDecode] = None
    # After categories: each event type names one of them (validated against info.data).
    event_types: Annotated[dict[str, Any] | None, NoDecode] = None
    # Templates fall back to this locale when neither the user's nor its language has one.
    default_locale: str = "en"
    # Contact channels (tepat/services/targets.py): send only to contact points marked
    # verified; unverified ones are skipped no_contact.
    require_verified_contacts: bool = False
    # --- email over SMTP (tepat/adapters/smtp_email.py); the channel is off without a host
    smtp_host: str | None = None
    smtp_port: int | None = Field(default=None, ge=1, le=65535)  # None: 25, 587 or 465 by TLS
    smtp_tls: Literal["none", "starttls", "implicit"] = "starttls"
    smtp_username: str | None = None
    smtp_password: SecretStr | None = Field(default=None, validate_default=True)
    smtp_from: str | None = Field(default=None, validate_default=True)
    # A PEM file of the CAs to trust for the relay instead of the system's (a self-signed relay).
    smtp_ca_file: str | None = None
    smtp_rate: float = Field(default=50, gt=0, le=100_000, description="messages/s to the relay")
    smtp_timeout: float = Field(default=30, gt=0, le=600)
    smtp_connections: int = Field(default=4, ge=1, le=64)
    # One-click unsubscribe (RFC 8058): the HMAC key of the link tokens, the base URL the
    # links point at (this API, as recipients reach it), how long a link works, and a
    # mailto for the List-Unsubscribe header.
    public_url: str | None = Field(default=None, validate_default=True)
    unsubscribe_secret: SecretStr | None = Field(default=None, validate_default=True)
    unsubscribe_mailto: str | None = None
    unsubscribe_link_days: int = Field(default=90, ge=1, le=3650)
    # Self-hosted relays posting bounce/complaint/delivery events: the HMAC-SHA256 key of
    # their X-Tepat-Signature header (SES over SNS is verified by its own signature).
    email_events_secret: SecretStr | None = None
    # SES over SNS: the topics whose (signed) notifications are believed, comma-separated
    # ARNs. A valid SNS signature only proves SNS sent it: anyone can subscribe us to a topic.
    email_events_topic_arns: str | None = None
    # --- SMS through Twilio (tepat/adapters/twilio_sms.py); the channel is off without
    # an account SID and auth token. Status callbacks go to TEPAT_PUBLIC_URL.
    twilio_account_sid: str | None = None
    twilio_auth_token: SecretStr | None = Field(default=None, validate_default=True)
    twilio_from: str | None = None  # E.164 number, short code or alphanumeric sender id
    twilio_messaging_service_sid: str | None = Field(default=None, validate_default=True)
    twilio_url: str = "https://api.twilio.com"
    twilio_rate: float = Field(default=10, gt=0, le=10_000, description="messages/s to Twilio")
    sms_max_segments: int = Field(default=3, ge=1, le=10)

    # --- status webhooks out (tepat/adapters/webhook_out.py): http:// URLs beyond loopback
    # (a private network; signatures still apply), and how long one POST may take.
    webhook_allow_http: bool = False
    webhook_timeout_seconds: float = Field(default=15, gt=0, le=120)

    @field_validator("database_url")
    @classmethod
    def _database_url(cls, v: str) -> str:
        if not (v.startswith("sqlite:///") or v.startswith(("mongodb://", "mongodb+srv://"))):
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
    @field_validator("broker_ca_file", "broker_key_file", "broker_cert_file")
    @classmethod
    def _broker_tls(cls, v: str | None, info: ValidationInfo) -> str | None:
        from tepat.adapters.stomp import tls

        v = v or None
        url = info.data.get("broker_url")
        if v and url and not url.startswith("stomp+ssl://"):
            scheme = url.partition("://")[0]
            raise ValueError(f"only used with stomp+ssl://, and TEPAT_BROKER_URL is {scheme}://")
        if info.field_name == "broker_ca_file" and v:
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

    @field_validator("expo_url")
    @classmethod
    def _expo_url(cls, v: str) -> str:
        if not v.startswith(("http://", "https://")):
            raise ValueError("expected an http(s) URL")
        return v.rstrip("/")

    @field_validator("log_level", "access_log_level")
    @classmethod
    def _log_level(cls, v: str) -> str:
        if v.upper() not in {"DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"}:
            raise ValueError("expected DEBUG, INFO, WARNING, ERROR or CRITICAL")
        return v.upper()

    @field_validator("categories", mode="before")
    @classmethod
    def _categories(cls, v: Any) -> Any:
        return _json_text(v, "category policies")

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

    @field_validator("event_types", mode="before")
    @classmethod
    def _event_types_json(cls, v: Any) -> Any:
        return _json_text(v, "event types")

    @field_validator("event_types")
    @classmethod
    def _event_types(cls, v: dict[str, Any] | None, info: ValidationInfo) -> dict[str, Any] | None:
        if v is None:
            return v
        if "categories" not in info.data:  # TEPAT_CATEGORIES is bad: that error is reported
            return v
        try:
            # Every channel here; whether its provider is configured is checked once
            # every setting is read (_routes_have_providers).
            parse_event_types(v, _category_policies(info.data["categories"]), ENABLED_CHANNELS)
        except DomainError as e:
            raise ValueError(f"{e.field}: {e.message}" if e.field else e.message) from None
        return v

    @model_validator(mode="after")
    def _routes_have_providers(self) -> Settings:
        if self.event_types is None:
            return self
        try:
            parse_event_types(self.event_types, self.category_policies(), self.enabled_channels())
        except DomainError as e:
            # A model-level error has no field location: the variable is named here.
            raise ValueError(f"{ENV_PREFIX}EVENT_TYPES: {e.field}: {e.message}") from None
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
        v = (v or "").strip() or None
        if v is not None and not _is_host(v):
            raise ValueError("expected a host name or IP address, without scheme or port")
        return v

    @field_validator("smtp_password")
    @classmethod
    def _smtp_password(cls, v: SecretStr | None, info: ValidationInfo) -> SecretStr | None:
        if v is not None and not v.get_secret_value():
            v = None
        if (v is None) != (not info.data.get("smtp_username")):
            raise ValueError("set both TEPAT_SMTP_USERNAME and TEPAT_SMTP_PASSWORD, or neither")
        return v

    @field_validator("smtp_from")
    @classmethod
    def _smtp_from(cls, v: str | None, info: ValidationInfo) -> str | None:
        v = (v or "").strip() or None
        if v is None:
            if info.data.get("smtp_host"):
                raise ValueError("required with TEPAT_SMTP_HOST: the sender's address")
            return None
        from tepat.adapters.smtp_message import parse_from

        parse_from(v)
        return v

    @field_validator("smtp_ca_file")
    @classmethod
    def _smtp_ca_file(cls, v: str | None) -> str | None:
        from tepat.adapters.stomp import tls

        v = v or None
        if v:
            tls.check_ca_file(v)
        return v

    @field_validator("public_url")
    @classmethod
    def _public_url(cls, v: str | None, info: ValidationInfo) -> str | None:
        v = (v or "").strip().rstrip("/") or None
        if v is None:
            if info.data.get("smtp_host"):
                raise ValueError(
                    "required with TEPAT_SMTP_HOST: the https URL recipients reach this API at"
                    " (for the unsubscribe links)"
                )
            return None
        from tepat.services.unsubscribe import check_public_url

        check_public_url(v)
        return v

    @field_validator("unsubscribe_secret")
    @classmethod
    def _unsubscribe_secret(cls, v: SecretStr | None, info: ValidationInfo) -> SecretStr | None:
        if v is not None and not v.get_secret_value():
            v = None
        if v is None:
            if info.data.get("smtp_host"):
                raise ValueError("required with TEPAT_SMTP_HOST: the key of the unsubscribe links")
            return None
        if len(v.get_secret_value().encode()) < 32:
            raise ValueError("too short: use at least 32 bytes (e.g. openssl rand -hex 32)")
        return v

    @field_validator("unsubscribe_mailto")
    @classmethod
    def _unsubscribe_mailto(cls, v: str | None) -> str | None:
        v = (v or "").strip() or None
        if v is not None:
            from tepat.adapters.smtp_message import check_mailto

            check_mailto(v)
        return v

    @field_validator("email_events_topic_arns")
    @classmethod
    def _email_events_topic_arns(cls, v: str | None) -> str | None:
        from tepat.domain.sns import check_topic_arn

        arns = [a.strip() for a in (v or "").split(",") if a.strip()]
        for arn in arns:
            check_topic_arn(arn)
        return ",".join(arns) or None

    @field_validator("email_events_secret")
    @classmethod
    def _email_events_secret(cls, v: SecretStr | None) -> SecretStr | None:
        if v is not None and not v.get_secret_value():
            return None
        if v is not None and len(v.get_secret_value().encode()) < 32:
            raise ValueError("too short: use at least 32 bytes (e.g. openssl rand -hex 32)")
        return v

    @field_validator("twilio_account_sid")
    @classmethod
    def _twilio_account_sid(cls, v: str | None) -> str | None:
        v = (v or "").strip() or None
        if v is not None and not re.fullmatch(r"AC[0-9a-fA-F]{32}", v):
            raise ValueError("expected a Twilio account SID: AC followed by 32 hex digits")
        return v

    @field_validator("twilio_auth_token")
    @classmethod
    def _twilio_auth_token(cls, v: SecretStr | None, info: ValidationInfo) -> SecretStr | None:
        if v is not None and not v.get_secret_value().strip():
            v = None
        if (v is None) != (info.data.get("twilio_account_sid") is None):
            raise ValueError(
                "set both TEPAT_TWILIO_ACCOUNT_SID and TEPAT_TWILIO_AUTH_TOKEN, or neither"
            )
        return v

    @field_validator("twilio_from")
    @classmethod
    def _twilio_from(cls, v: str | None) -> str | None:
        v = (v or "").strip() or None
        if v is not None and not _is_sms_sender(v):
            raise ValueError(
                "expected an E.164 number (+14155550100), a short code (digits) or an"
                " alphanumeric sender id (at most 11 letters and digits)"
            )
        return v

    @field_validator("twilio_messaging_service_sid")
    @classmethod
    def _twilio_service(cls, v: str | None, info: ValidationInfo) -> str | None:
        v = (v or "").strip() or None
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

    @field_validator("twilio_url")
    @classmethod
    def _twilio_url(cls, v: str) -> str:
        if not v.startswith(("http://", "https://")):
            raise ValueError("expected an http(s) URL")
        return v.rstrip("/")

    def category_policies(self) -> Categories:
        """The configured categories; the defaults when ``TEPAT_CATEGORIES`` is unset."""
        return _category_policies(self.categories)

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


def _category_policies(categories: dict[str, CategorySetting] | None) -> Categories:
    if not categories:
        return Categories(DEFAULT_CATEGORIES)
    return Categories(
        CategoryPolicy(
            name,
            quiet_hours=c.quiet_hours,
            missed_window=timedelta(minutes=c.missed_window_minutes),
            queue=c.queue,
            priority=c.priority,
            maybe_sent=c.maybe_sent or default_maybe_sent(name),
        )
        for name, c in categories.items()
    )


class ConfigError(SystemExit):
    """Raised by :func:`load_settings`; its message is the one line to print."""


def load_settings(**overrides: Any) -> Settings:
    """Settings from the environment, or :class:`ConfigError` naming the first bad variable."""
    try:
        return Settings(**overrides)
    except ValidationError as e:
        err = e.errors()[0]
        if not err["loc"]:  # a check across settings names its variable itself
            message = str(err["msg"]).removeprefix("Value error, ")
            raise ConfigError(f"tepat: bad configuration: {message}") from None
        name = ENV_PREFIX + "_".join(str(p) for p in err["loc"][:1]).upper()
        # Inside a structured variable, say where: TEPAT_CATEGORIES: safety.maybe_sent: ...
        inner = ".".join(str(p) for p in err["loc"][1:])
        where = f"{name}: {inner}" if inner else name
        # pydantic's "Value error, " prefix says nothing to an operator
        message = str(err["msg"]).removeprefix("Value error, ")
        raise ConfigError(f"tepat: bad configuration: {where}: {message}") from None


def _is_sms_sender(v: str) -> bool:
    """An E.164 number, a short code, or an alphanumeric sender id (Twilio's From)."""
    if v.startswith("+"):
        return re.fullmatch(r"\+[1-9][0-9]{6,14}", v) is not None
    if v.isdigit():
        return 3 <= len(v) <= 8
    return re.fullmatch(r"[A-Za-z0-9 ]{1,11}", v) is not None and any(c.isalpha() for c in v)


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
