"""The adapters and links the settings describe: each provider's channel, the unsubscribe
links.

Kept out of the adapters so that they take plain values and never import
:mod:`tepat.config` (the settings model sits above them: its validators use their
parsers). :mod:`tepat.runtime` and ``tepat doctor`` build from here.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import replace
from datetime import timedelta
from functools import partial
from urllib.parse import urlsplit

from tepat import metrics
from tepat.adapters.apns_auth import ProviderToken, read_signing_key
from tepat.adapters.apns_push import ApnsPushProvider
from tepat.adapters.breaker_guard import GuardedChannel, ProviderBreaker
from tepat.adapters.fcm_auth import FcmAuth, read_service_account
from tepat.adapters.fcm_push import FcmPushProvider
from tepat.adapters.sealed_apps import SealedApps
from tepat.adapters.secret_box import SealedWebhooks, SecretBox
from tepat.adapters.smtp_email import SmtpConfig, SmtpEmailChannel
from tepat.adapters.smtp_message import parse_from
from tepat.adapters.twilio_sms import TwilioSmsChannel
from tepat.adapters.webhook_out import WebhookChannel
from tepat.adapters.webhook_target import GuardedTransport, check_target
from tepat.adapters.webpush_push import Vapid, WebPushProvider
from tepat.clock import Clock
from tepat.config import Settings
from tepat.domain.breaker import BreakerSettings
from tepat.domain.categories import Categories
from tepat.domain.webhooks import parse_target_policy
from tepat.ports.channel import Channel
from tepat.ports.repositories.apps import AppRepository
from tepat.ports.repositories.webhooks import WebhookRepository
from tepat.services.sending.failover import FailoverChannel
from tepat.services.unsubscribe import UnsubscribeLinks

# the SMS adapter's logger: its warnings read as the adapter's
_sms_log = logging.getLogger("tepat.twilio")


def smtp_config(settings: Settings, secondary: bool = False) -> SmtpConfig | None:
    """The relay of ``TEPAT_SMTP_*``; ``secondary``: ``TEPAT_SMTP_SECONDARY_URL``'s, with
    everything else the first relay's (None without it)."""
    if not settings.smtp_host or not settings.smtp_from:
        return None
    if secondary:
        first = smtp_config(settings)
        url = urlsplit(settings.smtp_secondary_url or "")
        if first is None or url.hostname is None:
            return None
        return replace(
            first, host=url.hostname, port=url.port, username=url.username, password=url.password
        )
    password = settings.smtp_password
    return SmtpConfig(
        host=settings.smtp_host,
        sender=parse_from(settings.smtp_from),
        port=settings.smtp_port,
        tls=settings.smtp_tls,
        username=settings.smtp_username or None,
        password=password.get_secret_value() if password else None,
        ca_file=settings.smtp_ca_file,
        rate=settings.smtp_rate,
        critical_reserve=settings.critical_reserve,
        timeout=settings.smtp_timeout,
        connections=settings.smtp_connections,
        unsubscribe_mailto=settings.unsubscribe_mailto,
        allow_plaintext_auth=settings.smtp_allow_plaintext_auth,
    )


def build_email_channel(
    settings: Settings, clock: Clock, secondary: bool = False
) -> Channel | None:
    config = smtp_config(settings, secondary)
    return SmtpEmailChannel(config, clock) if config else None


def build_sms_channel(
    settings: Settings, clock: Clock, secondary: bool = False
) -> TwilioSmsChannel | None:
    """The Twilio account of ``TEPAT_TWILIO_*``; ``secondary``: the second account's
    (``TEPAT_TWILIO_SECONDARY_*``, the first's sender and URL where unset)."""
    sid, token = settings.twilio_account_sid, settings.twilio_auth_token
    if sid is None or token is None:
        return None
    from_number, service, url = (
        settings.twilio_from,
        settings.twilio_messaging_service_sid,
        settings.twilio_url,
    )
    if secondary:
        sid, token = settings.twilio_secondary_account_sid, settings.twilio_secondary_auth_token
        if sid is None or token is None:
            return None
        # A Messaging Service belongs to the first account.
        from_number, service = settings.twilio_secondary_from or from_number, None
        url = settings.twilio_secondary_url or url
    public_url = settings.public_url
    if public_url is None:
        _sms_log.warning(
            "TEPAT_PUBLIC_URL is unset: Twilio gets no StatusCallback, so SMS stay 'sent'"
            " (never 'delivered' or 'failed' from the carrier)"
        )
    return TwilioSmsChannel(
        account_sid=sid,
        auth_token=token.get_secret_value(),
        clock=clock,
        from_number=from_number,
        messaging_service_sid=service,
        base_url=url,
        public_url=public_url,
        rate=settings.twilio_rate,
        critical_reserve=settings.critical_reserve,
        max_segments=settings.sms_max_segments,
    )


def build_webhook_channel(settings: Settings, clock: Clock, store: WebhookRepository) -> Channel:
    """Always built: with no subscription there is simply nothing to send."""
    return WebhookChannel(
        webhook_repository(settings, store),
        clock,
        timeout_seconds=settings.webhook_timeout_seconds,
        allow_http=settings.webhook_allow_http,
        allowed_targets=parse_target_policy(settings.webhook_allow_private_hosts),
    )


def webhook_repository(settings: Settings, store: WebhookRepository) -> WebhookRepository:
    """``store``'s webhook subscriptions with their secrets encrypted at rest when
    ``TEPAT_SECRETS_KEY`` is set (and read either way)."""
    key = settings.secrets_key
    return SealedWebhooks(store, SecretBox(key.get_secret_value() if key else None))


def app_repository(settings: Settings, store: AppRepository) -> AppRepository:
    """The default app's registry of apps with their settings encrypted at rest when
    ``TEPAT_SECRETS_KEY`` is set (and read either way)."""
    key = settings.secrets_key
    box = SecretBox(key.get_secret_value() if key else None, what="an app's settings")
    return SealedApps(store, box)


def target_check(settings: Settings) -> Callable[[str], Awaitable[None]]:
    """A registration's check of a URL Tepat is to connect to (a webhook's, a Web Push
    endpoint): DomainError when its host may not be reached (SSRF)."""
    return partial(check_target, policy=parse_target_policy(settings.webhook_allow_private_hosts))


def build_unsubscribe_links(settings: Settings, clock: Clock) -> UnsubscribeLinks | None:
    """None unless both ``TEPAT_UNSUBSCRIBE_SECRET`` and ``TEPAT_PUBLIC_URL`` are set
    (both are required with ``TEPAT_SMTP_HOST``)."""
    if settings.unsubscribe_secret is None or not settings.public_url:
        return None
    return UnsubscribeLinks(
        settings.unsubscribe_secret.get_secret_value(),
        settings.public_url,
        clock,
        timedelta(days=settings.unsubscribe_link_days),
    )


def build_fcm_provider(settings: Settings, clock: Clock) -> FcmPushProvider | None:
    """The FCM push provider the settings describe; None without a service account."""
    if settings.fcm_credentials_file is None:
        return None
    auth = FcmAuth(read_service_account(settings.fcm_credentials_file), clock)
    return FcmPushProvider(
        auth,
        clock=clock,
        project_id=settings.fcm_project_id,
        base_url=settings.fcm_url,
        max_connections=settings.fcm_max_connections,
        rate_limit=settings.fcm_rate_limit,
        critical_reserve=settings.critical_reserve,
    )


def build_apns_provider(settings: Settings, clock: Clock) -> ApnsPushProvider | None:
    """The APNs provider of ``TEPAT_APNS_*``; None without an auth key."""
    key_file, key_id, team_id = settings.apns_key_file, settings.apns_key_id, settings.apns_team_id
    if not (key_file and key_id and team_id and settings.apns_topic):
        return None
    token = ProviderToken(
        read_signing_key(key_file),
        key_id=key_id,
        team_id=team_id,
        clock=clock,
    )
    return ApnsPushProvider(
        token,
        topic=settings.apns_topic,
        clock=clock,
        base_url=settings.apns_url,
        max_streams=settings.apns_max_streams,
    )


def build_guarded_channel(
    settings: Settings,
    clock: Clock,
    categories: Categories,
    build: Callable[[Settings, Clock, bool], Channel | None],
) -> Channel | None:
    """The channel ``build`` makes (e-mail, SMS) behind its provider's breaker; with a
    secondary provider configured, failing over to it (behind a breaker of its own)."""
    primary = build(settings, clock, False)
    if primary is None:
        return None
    channel, provider = primary.name, metrics.provider_of(primary.name)
    guarded = GuardedChannel(primary, provider_breaker(settings, clock, channel, provider))
    secondary = build(settings, clock, True)
    if secondary is None:
        return guarded
    to = f"{provider}_secondary"
    second = GuardedChannel(secondary, provider_breaker(settings, clock, channel, to))
    return FailoverChannel(guarded, second, categories, provider, to)


def provider_breaker(
    settings: Settings, clock: Clock, channel: str, provider: str
) -> ProviderBreaker:
    return ProviderBreaker(
        channel,
        provider,
        BreakerSettings(
            threshold=settings.breaker_threshold,
            cool_down=timedelta(seconds=settings.breaker_cool_down_seconds),
            probes=settings.breaker_half_open_probes,
        ),
        clock,
    )


def webpush_endpoint_check(settings: Settings) -> Callable[[str], Awaitable[None]] | None:
    """The registration's check of a Web Push endpoint (None: not checked). Endpoints come
    from users' browsers: each is checked as a webhook's URL is (SSRF), at registration and
    at every connection. Not with TEPAT_WEBPUSH_URL, which the operator points at a sandbox."""
    return target_check(settings) if settings.webpush_url is None else None


def build_webpush_provider(settings: Settings, clock: Clock) -> WebPushProvider | None:
    """The Web Push provider of ``TEPAT_WEBPUSH_*``; None without a VAPID key."""
    key_file, subject = settings.webpush_vapid_private_key_file, settings.webpush_vapid_subject
    if not (key_file and subject):
        return None
    transport = None
    if settings.webpush_url is None:  # every connection checked: webpush_endpoint_check
        policy = parse_target_policy(settings.webhook_allow_private_hosts)
        transport = GuardedTransport(policy, settings.webpush_max_connections)
    return WebPushProvider(
        Vapid(read_signing_key(key_file), subject, clock),
        clock=clock,
        base_url=settings.webpush_url,
        max_connections=settings.webpush_max_connections,
        transport=transport,
    )
