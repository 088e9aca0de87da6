"""Wiring: build the adapters the configuration names and the services on top of them.

The only module that knows every adapter; entrypoints ask it for a
:class:`Runtime` and never construct adapters themselves.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import timedelta
from typing import cast

import structlog

from tepat.adapters.breaker_guard import GuardedPush
from tepat.adapters.webhook_out import WEBHOOK_RETRY
from tepat.clock import Clock, SystemClock
from tepat.config import ConfigError, Settings
from tepat.domain.apps import DEFAULT_APP
from tepat.domain.categories import Categories
from tepat.domain.queues import PUSH, queues_for_channels
from tepat.domain.retry import RetryPolicy
from tepat.domain.zones import TZDATA_RELEASE
from tepat.loops import LoopLog, repeat
from tepat.ports.broker import Broker, RedeliveryPolicy
from tepat.ports.channel import Channel
from tepat.ports.push import PushProvider
from tepat.ports.store import Store
from tepat.services.enqueue import Enqueuer
from tepat.services.events import EventService
from tepat.services.inbox import InboxNotifier, InboxService
from tepat.services.outbox import Outbox
from tepat.services.planning.creator import Creator
from tepat.services.sending.channel_sender import ChannelSender
from tepat.services.sending.dispatcher import Dispatcher
from tepat.services.sending.inbox_channel import InboxChannel
from tepat.services.sending.lease import ClaimsInHand
from tepat.services.sending.push_channel import PushChannel
from tepat.services.sending.receipts import ReceiptPoller
from tepat.services.sending.sweeper import Sweeper
from tepat.services.templates import TemplateService
from tepat.wiring import (
    build_apns_provider,
    build_email_channel,
    build_fcm_provider,
    build_guarded_channel,
    build_sms_channel,
    build_unsubscribe_links,
    build_webhook_channel,
    build_webpush_provider,
    provider_breaker,
)

log = structlog.get_logger("tepat.runtime")


def make_store(settings: Settings, clock: Clock) -> Store:
    url = settings.database_url
    if url.startswith("sqlite:///"):
        from tepat.adapters.sqlite import SqliteStore

        return SqliteStore(url.removeprefix("sqlite:///"), clock=clock)
    from tepat.adapters.mongo import MongoStore

    return MongoStore(url, clock=clock)


def make_broker(settings: Settings, clock: Clock) -> Broker:
    redelivery = RedeliveryPolicy(retry_age=timedelta(seconds=settings.broker_retry_age_seconds))
    if settings.broker_url == "embedded://":
        from tepat.adapters.embedded_broker import EmbeddedBroker

        return EmbeddedBroker(
            clock, redelivery=redelivery, lead_seconds=settings.broker_lead_seconds
        )
    from tepat.adapters.stomp import StompBroker, TlsFiles

    tls = None
    if settings.broker_url.startswith("stomp+ssl://"):
        tls = TlsFiles(settings.broker_ca_file, settings.broker_cert_file, settings.broker_key_file)
    return StompBroker(
        settings.broker_url,
        clock=clock,
        redelivery=redelivery,
        tls=tls,
        lead_seconds=settings.broker_lead_seconds,
    )


async def _connect_broker(broker: Broker) -> None:
    """Connect; a broker that refuses the settings (certificate, credentials) stops the
    process with one line naming the variable, since retrying cannot help."""
    try:
        await broker.connect()
    except ConnectionError as e:
        from tepat.adapters.stomp import BrokerRefused

        if not isinstance(e, BrokerRefused):
            raise
        # e.setting: the variable to change, url, ca_file or cert_file (TEPAT_BROKER_*)
        raise ConfigError(
            f"tepat: bad configuration: TEPAT_BROKER_{e.setting.upper()}: {e}"
        ) from None


def make_push_provider(settings: Settings, clock: Clock) -> PushProvider:
    from tepat.adapters.expo_push import ExpoPushProvider

    token = settings.expo_access_token
    return ExpoPushProvider(
        settings.expo_url,
        access_token=token.get_secret_value() if token else None,
        max_connections=settings.expo_max_connections,
        rate_limit=settings.expo_rate_limit,
        critical_reserve=settings.critical_reserve,
        clock=clock,
    )


def push_concurrency(settings: Settings) -> dict[str, int]:
    """Requests each device kind's batcher has in flight at once: Expo's, one per
    connection (a request carries up to 100 notifications). FCM, APNs and Web Push keep the
    batcher's 6: their batch fans out into a request per notification, which the adapter's
    own slots bound (``TEPAT_FCM_MAX_CONNECTIONS``, ``TEPAT_APNS_MAX_STREAMS``); 6 batches
    of up to 500 or 100 keep those full, and more would only wait there, past the
    still-sendable check a batch passes when it starts."""
    return {"expo": settings.expo_max_connections}


def make_push_providers(
    settings: Settings, clock: Clock, expo: PushProvider | None = None
) -> dict[str, PushProvider]:
    """The provider of each device kind this deployment sends to (``Device.kind``): Expo
    always; a direct provider (FCM, APNs, Web Push) is one more entry when configured."""
    providers: dict[str, PushProvider] = {"expo": expo or make_push_provider(settings, clock)}
    direct = (build_fcm_provider, build_apns_provider, build_webpush_provider)
    for kind, build in zip(("fcm", "apns", "webpush"), direct, strict=True):
        if (provider := build(settings, clock)) is not None:
            providers[kind] = provider
    return providers


@dataclass
class Runtime:
    settings: Settings
    clock: Clock
    categories: Categories
    store: Store
    broker: Broker
    enqueuer: Enqueuer
    outbox: Outbox
    creator: Creator
    dispatcher: Dispatcher
    receipts: ReceiptPoller
    sweeper: Sweeper
    # The in-app inbox, shared by the API (its streams), the consumers' inbox channel and
    # the events fan-out, so an item stored in this process wakes its streams at once.
    inbox: InboxService
    # The device kinds a provider is configured for; a device of another kind is refused.
    push_kinds: frozenset[str]
    # The app whose store, queues and providers these are (tepat/tenancy.py).
    app_id: str = DEFAULT_APP

    @property
    def channels(self) -> list[str]:
        """Push and every channel whose provider is configured."""
        return self.dispatcher.channels.channels

    @property
    def queues(self) -> list[str]:
        """Every queue this process consumes, highest priority first."""
        return queues_for_channels(self.categories, self.channels)

    @property
    def embedded_broker(self) -> bool:
        return self.settings.broker_url == "embedded://"

    async def every(
        self,
        stop: asyncio.Event,
        seconds: float,
        one_round: Callable[[], Awaitable[object]],
        logger: LoopLog,
        failed: str,
        *,
        while_busy: bool = False,
    ) -> None:
        """:func:`tepat.loops.repeat` on this runtime's clock, the store's outage expected."""
        await repeat(
            self.clock,
            stop,
            seconds,
            one_round,
            logger,
            failed,
            while_busy=while_busy,
            expected=self.store.unavailable_errors,
        )

    async def recover_at_start(self) -> None:
        """What a start owes the previous process's messages, before anything consumes.

        The embedded broker keeps nothing: every pending message goes back onto the
        outbox (keeping its instant) and is published again, batched. Nor does anyone else
        own this store: what the previous process left ``sending`` is re-driven now, due
        now, rather than a lease later (:class:`Sweeper`). A shared broker (ActiveMQ):
        nothing; its queues outlived the process, and a message ``sending`` may be a live
        consumer's, so only the lease re-drives it (the sweeper).
        """
        if not self.embedded_broker:
            return
        await self.sweeper.redrive_left_sending()
        await self.store.republish_all_pending()
        batches = await self.outbox.flush()
        log.info("embedded queue restored from the store", batches=batches)


def build_dispatcher(
    settings: Settings,
    clock: Clock,
    store: Store,
    categories: Categories,
    outbox: Outbox,
    push: Mapping[str, PushProvider],
    inbox: InboxService,
) -> Dispatcher:
    """The send path over every channel this configuration can send on: push, the inbox
    and webhook deliveries always, e-mail and SMS when their provider is configured."""
    claims = ClaimsInHand(store, clock, timedelta(seconds=settings.sending_lease_seconds))
    # A breaker per provider (docs/guides/operations.md, "Circuit breaker"): each push
    # kind's, e-mail's relay, SMS's account. Not webhooks: each target is its own endpoint,
    # and one receiver down must not stop the others.
    guarded = {
        kind: GuardedPush(provider, provider_breaker(settings, clock, PUSH, kind))
        for kind, provider in push.items()
    }
    push_channel = PushChannel(
        guarded,
        store,
        clock,
        categories,
        device_max_failures=settings.device_max_failures,
        concurrency=push_concurrency(settings),
    )
    channels: dict[str, Channel] = {"push": push_channel, "inbox": InboxChannel(inbox)}
    for build in (build_email_channel, build_sms_channel):
        channel = build_guarded_channel(settings, clock, categories, build)
        if channel is not None:
            channels[channel.name] = channel
    channels["webhook"] = build_webhook_channel(settings, clock, store)
    links = build_unsubscribe_links(settings, clock)
    sender = ChannelSender(
        store,
        categories,
        clock,
        channels,
        retry=RetryPolicy(
            max_attempts=settings.max_attempts,
            max_age=timedelta(seconds=settings.max_retry_age_seconds),
        ),
        retry_for={"webhook": WEBHOOK_RETRY},
        flush=outbox.flush_quietly,
        unsubscribe_url=None if links is None else links.url_for,
        require_verified=settings.require_verified_contacts,
        may_send=claims.may_send,
    )
    claim_ahead = timedelta(seconds=settings.claim_ahead_seconds)
    return Dispatcher(store, sender, claims, clock, claim_ahead)


@asynccontextmanager
async def open_runtime(
    settings: Settings,
    *,
    clock: Clock | None = None,
    store: Store | None = None,
    broker: Broker | None = None,
    push: PushProvider | None = None,
    push_providers: Mapping[str, PushProvider] | None = None,
    app_id: str = DEFAULT_APP,
    queue_namespace: str = "",
) -> AsyncIterator[Runtime]:
    """``push`` replaces the Expo provider, ``push_providers`` adds or replaces others;
    ``app_id``'s queues are named with ``queue_namespace`` first on the broker."""
    clock = clock or SystemClock()
    categories = settings.category_policies()
    store = store or make_store(settings, clock)
    broker = broker or make_broker(settings, clock)
    if queue_namespace:
        from tepat.adapters.namespaced_broker import NamespacedBroker, SharedBroker

        # Both adapters (embedded, STOMP) are shared brokers: a replay stays in the namespace.
        broker = NamespacedBroker(cast(SharedBroker, broker), queue_namespace)
    providers = {**make_push_providers(settings, clock, push), **(push_providers or {})}
    await store.open()
    rt: Runtime | None = None
    try:
        await _connect_broker(broker)
        try:
            enqueuer = Enqueuer(broker, categories, clock)
            # A write publishes at once what the publisher loop might not reach in time.
            soon = max(5.0, 2 * settings.outbox_interval_seconds + settings.broker_lead_seconds)
            outbox = Outbox(
                store, enqueuer, categories, clock, publish_soon=timedelta(seconds=soon)
            )
            inbox = InboxService(
                store,
                clock,
                categories,
                InboxNotifier(settings.inbox_max_streams, settings.inbox_max_streams_per_user),
            )
            dispatcher = build_dispatcher(
                settings, clock, store, categories, outbox, providers, inbox
            )
            rt = Runtime(
                settings=settings,
                app_id=app_id,
                inbox=inbox,
                push_kinds=frozenset(providers),
                clock=clock,
                categories=categories,
                store=store,
                broker=broker,
                enqueuer=enqueuer,
                outbox=outbox,
                creator=Creator(
                    store,
                    outbox,
                    categories,
                    clock,
                    horizon=timedelta(hours=settings.plan_horizon_hours),
                ),
                dispatcher=dispatcher,
                receipts=ReceiptPoller(
                    store,
                    providers["expo"],  # the one kind with receipts to poll
                    clock,
                    delay=timedelta(seconds=settings.receipt_delay_seconds),
                    device_max_failures=settings.device_max_failures,
                ),
                sweeper=Sweeper(
                    store,
                    outbox,
                    clock,
                    grace=timedelta(seconds=settings.sweep_grace_seconds),
                    lease=dispatcher.claims.lease,
                ),
            )
            log.info(
                "runtime ready",
                app=app_id,
                tzdata=TZDATA_RELEASE,
                store=type(store).__name__,
                broker=type(broker).__name__,
            )
            yield rt
        finally:
            for provider in providers.values():
                await provider.close()
            if rt is not None:
                await rt.dispatcher.channels.close()
            await broker.close()
    finally:
        await store.close()


def event_service(rt: Runtime, templates: TemplateService | None = None) -> EventService:
    """The events service over a runtime, sharing the API's template service when given
    (its cache)."""
    return EventService(
        rt.store,
        rt.clock,
        rt.categories,
        rt.settings.event_routing(),
        templates or template_service(rt),
        rt.outbox,
    )


def template_service(rt: Runtime) -> TemplateService:
    return TemplateService(
        rt.store, rt.settings.event_routing(), rt.clock, rt.settings.default_locale
    )
