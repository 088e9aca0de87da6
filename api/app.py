"""The FastAPI application: routes, authentication, problem+json errors, OpenAPI.

The caller owns the :class:`~tepat.runtime.Runtime` (opens and closes it); the
app only uses it. ``tepat serve`` / ``tepat api`` run it inside uvicorn::

    async with open_runtime(settings) as rt:
        key, generated = resolve_admin_key(settings)
        app = create_app(rt, key)
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from api import docs_pages
from api.app_services import AppServices, ServedApps
from api.auth import PATH_APP, PROVIDER_PREFIX, Authenticator, AuthMiddleware
from api.problems import document_problems, install_problem_handlers, problem_response
from api.request_id import RequestIdMiddleware
from api.routes import (
    admin,
    bulk,
    contacts,
    dashboard,
    devices,
    events,
    health,
    inbox,
    messages,
    preferences,
    providers_email,
    providers_twilio,
    reminders,
    suppressions,
    templates,
    unsubscribe,
    users,
    webhooks,
)
from api.routes import apps as app_registry
from api.schemas import BulkUserIn
from api.throttle import FailureThrottle
from tepat import tracing
from tepat.domain.apps import APP_PATH_PREFIX, DEFAULT_APP, valid_app_id
from tepat.logging import redact
from tepat.runtime import Runtime
from tepat.tenancy import Apps

MAX_BODY_BYTES = 64 * 1024

DESCRIPTION = """\
Tepat sends each user's notifications at the right local moment, once.

**Authentication.** Operators and backends send `X-API-Key: <admin key>` and reach
every endpoint. A backend may instead send its own app key (`TEPAT_APP_KEYS`), which
reaches only its own events under `/v1/events`. End users send `Authorization: Bearer
<JWT>` (HS256, `sub` = user id, `exp` required) and reach only `/v1/users/{sub}/…`.
`/healthz`, `/readyz` and `/metrics` are open. The operator dashboard (`/dashboard`, not
part of this document) takes the admin key through a login form.

**Errors** are `application/problem+json` (RFC 9457); input errors name each
offending field in `errors[].field`.
"""


def create_app(rt: Runtime, admin_key: str, apps: Apps | None = None) -> FastAPI:
    """The HTTP API over an open runtime, the default app's; ``admin_key`` from
    :func:`resolve_admin_key`; ``apps``: every app served (tepat/tenancy.py), the default
    one alone when None."""
    apps = apps or Apps(rt.settings, rt)
    authenticator = Authenticator(rt.settings, admin_key, rt.clock, apps)
    # /docs and /redoc run CDN scripts on the dashboard's origin (pinned, with integrity:
    # api/docs_pages.py): off unless TEPAT_API_DOCS asks for them.
    app = FastAPI(
        title="Tepat",
        version="0.1.0",
        description=DESCRIPTION,
        docs_url=None,
        redoc_url=None,
        # Tepat's tracing instruments the app itself (tracing.instrument_app below);
        # FastAPI's own telemetry only looked up OpenTelemetry's global providers on every
        # request to find them unset (an os.environ read each: 6 % of a PUT's loop time).
        telemetry={"tracing": False, "metrics": False, "logs": False},
    )
    if rt.settings.api_docs:
        app.include_router(docs_pages.router)
    app.state.apps = apps
    app.state.served_apps = ServedApps(apps)
    # Wrong keys per client IP, for the API and the dashboard login alike.
    app.state.auth_throttle = FailureThrottle(rt.settings.auth_failures_per_minute, rt.clock)
    # The default app's services, where api/deps.py service_of reads them (and some tests
    # replace them); other apps' are built by served_apps.
    default = AppServices.over(rt)
    for name in ("runtime", "templates", "inbox", "events", "unsubscribe", "email_events"):
        setattr(app.state, name, getattr(default, name))
    # /v1/providers/...: no API key, the provider's signature instead (api/auth.py)
    for module in (
        *(users, devices, reminders, preferences, messages, bulk, admin, app_registry, health),
        templates,
        *(inbox, events, contacts, suppressions, providers_twilio, webhooks, unsubscribe),
        providers_email,
    ):
        app.include_router(module.router)
    dashboard.install(app, rt, admin_key)  # /dashboard: session cookie or X-API-Key
    install_problem_handlers(app, rt.store.unavailable_errors)
    # The last added runs first: credentials are checked before any body is read.
    app.add_middleware(
        BodyLimitMiddleware,
        max_bytes=MAX_BODY_BYTES,
        path_limits={
            bulk.PATH: bulk.MAX_BODY_BYTES,
            events.PATH: events.MAX_BODY_BYTES,
            providers_email.PATH: providers_email.MAX_BODY_BYTES,
        },
    )
    app.add_middleware(
        AuthMiddleware, authenticator=authenticator, throttle=app.state.auth_throttle
    )
    app.add_middleware(AppPathMiddleware)
    # Outermost: a refused request's lines carry its id too.
    app.add_middleware(RequestIdMiddleware)
    tracing.instrument_app(app, redact)  # tracing on: the request's span, its messages' trace
    app.openapi = lambda: _openapi(app)  # type: ignore[method-assign]
    return app


class AppPathMiddleware:
    """``/apps/<id>/u/…`` and ``/apps/<id>/v1/providers/…``: the public paths of an app
    other than the default one (its unsubscribe links, its provider callbacks: no
    credentials, so the path says the app; tepat/tenancy.py app_public_url). The rest of
    the path is routed as usual, in that app. Any other path under ``/apps/`` is 404:
    a request with credentials acts in its credentials' app, never in one a path names."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        if scope["type"] != "http" or not path.startswith(APP_PATH_PREFIX):
            await self.app(scope, receive, send)
            return
        app_id, _, rest = path.removeprefix(APP_PATH_PREFIX).partition("/")
        rest = f"/{rest}"
        if (
            not valid_app_id(app_id)
            or app_id == DEFAULT_APP
            or not rest.startswith(("/u/", PROVIDER_PREFIX))
        ):
            await problem_response(404, "not found")(scope, receive, send)
            return
        state = {**scope.get("state", {}), PATH_APP: app_id}
        scope = {**scope, "path": rest, "raw_path": rest.encode(), "state": state}
        await self.app(scope, receive, send)


class BodyLimitMiddleware:
    """413 for a request body over ``max_bytes``, whether declared or streamed.

    Bodies here are small JSON documents, so it reads the body up front (at most
    ``max_bytes``) and replays it to the app. ``path_limits`` gives a path (the
    bulk import) a limit of its own.
    """

    def __init__(self, app: ASGIApp, max_bytes: int, path_limits: dict[str, int]) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.path_limits = path_limits

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] in ("GET", "HEAD", "DELETE", "OPTIONS"):
            await self.app(scope, receive, send)
            return
        max_bytes = self.path_limits.get(scope["path"], self.max_bytes)
        declared = dict(scope["headers"]).get(b"content-length", b"0")
        if not declared.isdigit() or int(declared) > max_bytes:
            await self._too_large(scope, receive, send, max_bytes)
            return
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":  # the client went away
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > max_bytes:
                await self._too_large(scope, receive, send, max_bytes)
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        pending: list[Message] = [{"type": "http.request", "body": b"".join(chunks)}]

        async def replay() -> Message:
            return pending.pop() if pending else await receive()

        await self.app(scope, replay, send)

    async def _too_large(self, scope: Scope, receive: Receive, send: Send, limit: int) -> None:
        detail = f"request body over {limit} bytes"
        await problem_response(413, detail)(scope, receive, send)


def _openapi(app: FastAPI) -> dict[str, Any]:
    """FastAPI's document, with the errors every route may answer, as problem+json."""
    if app.openapi_schema:
        return app.openapi_schema
    doc = get_openapi(
        title=app.title,
        version=app.version,
        description=app.description,
        routes=app.routes,
        separate_input_output_schemas=app.separate_input_output_schemas,
    )
    document_problems(doc, "/v1/", PROVIDER_PREFIX)
    # The bulk import reads its body itself (JSON array or NDJSON); publish its item model.
    item = BulkUserIn.model_json_schema(ref_template="#/components/schemas/{model}")
    schemas = doc.setdefault("components", {}).setdefault("schemas", {})
    schemas.update(item.pop("$defs", {}))
    schemas["BulkUserIn"] = item
    app.openapi_schema = doc
    return doc
