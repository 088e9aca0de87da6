"""Apps in one process: the default app's runtime, and one runtime per registered app.

Each app is a silo: its own store (a SQLite file beside the default one, a MongoDB
database beside the default one), its own broker queues (a namespace on a shared
ActiveMQ; an embedded broker of its own), its own providers and rate buckets, built from
its settings (:func:`app_settings`). The default app is the deployment as configured, so
a deployment from before apps runs unchanged. Its store also holds the registry
(:class:`~tepat.ports.repositories.apps.AppRepository`) that :class:`Apps` reads every
``TEPAT_APPS_REFRESH_SECONDS``: an app added, changed or disabled through
``/v1/admin/apps`` is opened, reopened or closed without a restart.
"""

from __future__ import annotations

import asyncio
import contextvars
import hashlib
import hmac
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager, AsyncExitStack
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import structlog
from pydantic import SecretStr, ValidationError

from tepat.config import Settings
from tepat.domain.apps import APP_OWN_SETTINGS, APP_PATH_PREFIX, DEFAULT_APP, App, AppKey
from tepat.domain.errors import DomainError
from tepat.ports.repositories.apps import AppRepository
from tepat.runtime import Runtime, open_runtime
from tepat.wiring import app_repository

log = structlog.get_logger("tepat.apps")
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
STALE_AFTER_SECONDS = 1.0


def app_database_url(url: str, app_id: str) -> str:
    """The app's store beside the default one: ``tepat.db`` -> ``tepat.app-<id>.db``; a
    MongoDB database ``tepat`` -> ``tepat-app-<id>``."""
    if url.startswith("sqlite:///"):
        path = url.removeprefix("sqlite:///")
        if path == ":memory:":
            return url
        stem, dot, ext = path.rpartition(".")
        if not dot or "/" in ext:
            return f"{url}.app-{app_id}"
        return f"sqlite:///{stem}.app-{app_id}.{ext}"
    from tepat.adapters.mongo.base import database_name

    parts = urlsplit(url)
    return urlunsplit(parts._replace(path=f"/{database_name(url)}-app-{app_id}"))


def app_public_url(public_url: str, app_id: str) -> str:
    """Where recipients and providers reach the app: its unsubscribe links and provider
    callbacks carry the app in the path (api/app.py AppPathMiddleware)."""
    return f"{public_url.rstrip('/')}{APP_PATH_PREFIX}{app_id}"


def derived_secret(secret: str, app_id: str) -> str:
    """A key of the app's own from the deployment's: a token signed for one app does not
    verify for another."""
    return hmac.new(secret.encode(), f"tepat app {app_id}".encode(), hashlib.sha256).hexdigest()


def queue_namespace(app_id: str) -> str:
    """The prefix of the app's queue names on a shared broker ('' for the default app)."""
    return "" if app_id == DEFAULT_APP else f"app.{app_id}."


def app_settings(base: Settings, app: App) -> Settings:
    """The deployment's settings with the app's own: its store, and its overrides; its
    accounts and secrets (APP_OWN_SETTINGS) never come from the deployment.

    Raises :class:`DomainError` naming ``settings.<name>`` for a value the settings model
    refuses."""
    values: dict[str, Any] = base.model_dump()
    for name in APP_OWN_SETTINGS:
        values[name] = Settings.model_fields[name].default
    values.update(app.settings)
    values["database_url"] = app_database_url(base.database_url, app.app_id)
    if base.public_url:
        values["public_url"] = app_public_url(base.public_url, app.app_id)
    if "unsubscribe_secret" not in app.settings and base.unsubscribe_secret is not None:
        values["unsubscribe_secret"] = SecretStr(
            derived_secret(base.unsubscribe_secret.get_secret_value(), app.app_id)
        )
    try:
        return Settings.model_validate(values)
    except ValidationError as e:
        error = e.errors()[0]
        name = ".".join(str(part) for part in error["loc"]) or "settings"
        raise DomainError(f"settings.{name}", error["msg"]) from None


def settings_check(base: Settings) -> Callable[[dict[str, Any]], None]:
    """The apps service's check of an app's settings: the settings model's own."""

    def check(settings: dict[str, Any]) -> None:
        app_settings(base, App(app_id="check", name="check", created_at=_EPOCH, settings=settings))

    return check


def open_app_runtime(
    base: Settings, app: App, default: Runtime
) -> AbstractAsyncContextManager[Runtime]:
    """The app's runtime on the default app's clock, its queues in their namespace."""
    return open_runtime(
        app_settings(base, app),
        clock=default.clock,
        app_id=app.app_id,
        queue_namespace=queue_namespace(app.app_id),
    )


Opener = Callable[[App], AbstractAsyncContextManager[Runtime]]
Listener = Callable[[Runtime], Awaitable[object]]


@dataclass
class _Served:
    app: App
    runtime: Runtime
    stack: AsyncExitStack


class Apps:
    """The runtimes this process serves, by app id, and the registry's keys.

    ``on_open`` runs after an app's runtime opens (a process starts its loops there),
    ``on_close`` before it closes (they stop and drain). A registered app whose runtime
    cannot open (a credentials file missing) is logged and tried again at the next
    refresh; the other apps go on."""

    def __init__(
        self,
        base: Settings,
        default: Runtime,
        *,
        opener: Opener | None = None,
        registry: AppRepository | None = None,
    ) -> None:
        self.base = base
        self.default = default
        # None in a process that serves the default app alone (tests, ``create_app(rt)``).
        self.registry = registry
        self._opener = opener or (lambda app: open_app_runtime(base, app, default))
        self._served: dict[str, _Served] = {}
        self._keys: dict[str, AppKey] = {}
        self._lock = asyncio.Lock()
        self._refreshed_at: datetime | None = None
        self.on_open: list[Listener] = []
        self.on_close: list[Listener] = []

    @classmethod
    def serving(cls, base: Settings, default: Runtime) -> Apps:
        """Every registered app beside the default one, read from the default app's store
        (its settings sealed at rest: TEPAT_SECRETS_KEY)."""
        return cls(base, default, registry=app_repository(base, default.store))

    def runtime(self, app_id: str) -> Runtime | None:
        if app_id == DEFAULT_APP:
            return self.default
        served = self._served.get(app_id)
        return served.runtime if served else None

    def others(self) -> list[Runtime]:
        """The registered apps' runtimes served now."""
        return [s.runtime for s in self._served.values()]

    def key(self, key_hash: str) -> AppKey | None:
        """The active key with this hash, of an app served here."""
        key = self._keys.get(key_hash)
        if key is None or self.runtime(key.app_id) is None:
            return None
        return key

    async def refresh_if_stale(self) -> bool:
        """Refresh unless the last one began under ``STALE_AFTER_SECONDS`` ago; whether it
        did. For a key this process does not know yet (made through another process): it
        is looked up once more before it counts as wrong, at most once a second."""
        now = self.default.clock.now()
        last = self._refreshed_at
        if self.registry is None or (
            last is not None and (now - last).total_seconds() < STALE_AFTER_SECONDS
        ):
            return False
        await self.refresh()
        return True

    async def refresh(self) -> None:
        """Open, reopen (a new version) and close runtimes to match the registry."""
        if self.registry is None:
            return
        self._refreshed_at = self.default.clock.now()
        # In a context of its own: the runtimes opened and the loops started outlive the
        # caller (a request to /v1/admin/apps), and must not carry its request id or span.
        await asyncio.create_task(self._refresh(), context=contextvars.Context())

    async def _refresh(self) -> None:
        assert self.registry is not None
        async with self._lock:
            apps = {a.app_id: a for a in await self.registry.list_apps() if not a.disabled}
            keys: dict[str, AppKey] = {}
            for app_id in [DEFAULT_APP, *apps]:
                for key in await self.registry.list_app_keys(app_id):
                    if key.active:
                        keys[key.key_hash] = key
            # Before the opening: an app is answered for as soon as it is served (the
            # keys of an app not served yet are refused by key()).
            self._keys = keys
            for app_id, served in list(self._served.items()):
                wanted = apps.get(app_id)
                if wanted is None or wanted.version != served.app.version:
                    await self._close(app_id)
            for app_id, app in apps.items():
                if app_id not in self._served and app_id != DEFAULT_APP:
                    await self._open(app)

    async def _open(self, app: App) -> None:
        stack = AsyncExitStack()
        try:
            runtime = await stack.enter_async_context(self._opener(app))
        except Exception as e:  # one app's bad account must not stop the others
            await stack.aclose()
            log.error("app not opened", app=app.app_id, error=str(e) or type(e).__name__)
            return
        self._served[app.app_id] = _Served(app, runtime, stack)
        log.info("app opened", app=app.app_id, version=app.version)
        for listener in self.on_open:
            await listener(runtime)

    async def _close(self, app_id: str) -> None:
        served = self._served.pop(app_id)
        for listener in self.on_close:
            await listener(served.runtime)
        await served.stack.aclose()
        log.info("app closed", app=app_id)

    async def forget(self, runtime: Runtime) -> None:
        """Close the app of ``runtime`` now (a part of it failed); the next refresh opens it
        again. Not if the app was reopened since: its new runtime is not the one failing."""
        async with self._lock:
            served = self._served.get(runtime.app_id)
            if served is not None and served.runtime is runtime:
                await self._close(runtime.app_id)

    async def close(self) -> None:
        async with self._lock:
            for app_id in list(self._served):
                await self._close(app_id)

    async def run_refresh(self, stop: asyncio.Event) -> None:
        """Refresh every ``TEPAT_APPS_REFRESH_SECONDS`` until ``stop``."""
        await self.default.every(
            stop,
            self.base.apps_refresh_seconds,
            self.refresh,
            log,
            "apps refresh failed",
        )
