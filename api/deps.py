"""Shared route pieces: the runtime and services a route reaches, who may call it (the
route dependencies re-check :class:`api.auth.AuthMiddleware`'s rule against the parsed
path, and declare the schemes for OpenAPI), the user-scoped and admin-only routers, and the
status of a create-or-existing call."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Request, Response
from fastapi.security import APIKeyHeader, HTTPAuthorizationCredentials, HTTPBearer

from api.app_services import ServedApps
from api.auth import ADMIN_ONLY, OWN_USER_ONLY, PATH_APP, AuthError, Principal
from api.problems import ProblemError, problem_responses
from tepat.domain.apps import DEFAULT_APP
from tepat.domain.validation import IDENTIFIER_PATTERN
from tepat.runtime import Runtime
from tepat.services.events import EventService
from tepat.services.inbox import InboxService
from tepat.services.templates import TemplateService


def app_state(name: str) -> Any:
    """A dependency reading what :func:`api.app.create_app` put in ``app.state.<name>``."""

    async def read(request: Request) -> Any:
        return getattr(request.app.state, name)

    return Depends(read)


def request_app(request: Request) -> str:
    """The app a request acts in: its credentials' app; on a public path, the app its
    path names (api/app.py AppPathMiddleware); else the default app (health checks, the
    dashboard)."""
    state = request.scope.get("state", {})
    principal = state.get("principal")
    if isinstance(principal, Principal):
        return principal.app_id
    path_app = state.get(PATH_APP)
    return path_app if isinstance(path_app, str) else DEFAULT_APP


def service_of(request: Request, name: str) -> Any:
    """The ``name`` service of the request's app (api/app_services.py)."""
    app_id = request_app(request)
    if app_id == DEFAULT_APP:  # built by create_app (and replaced by some tests)
        return getattr(request.app.state, name)
    served: ServedApps = request.app.state.served_apps
    services = served.services(app_id)
    if services is None:
        if isinstance(request.scope.get("state", {}).get("principal"), Principal):
            # closed since its key was checked (disabled, or reopening with new settings)
            raise AuthError(401, "this app is not served now; try again")
        raise ProblemError(404, f"no app {app_id!r} here")
    return getattr(services, name)


def app_service(name: str) -> Any:
    """A dependency reading the ``name`` service of the request's app."""

    async def read(request: Request) -> Any:
        return service_of(request, name)

    return Depends(read)


RT = Annotated[Runtime, app_service("runtime")]
Templates = Annotated[TemplateService, app_service("templates")]
Inbox = Annotated[InboxService, app_service("inbox")]
Events = Annotated[EventService, app_service("events")]


def id_path(description: str, example: str) -> Any:
    return Path(
        description=description,
        min_length=1,
        max_length=128,
        pattern=IDENTIFIER_PATTERN,
        examples=[example],
    )


DeviceId = Annotated[
    str, id_path("Your id for the device (stable across token rotation)", "phone-1")
]
ReminderId = Annotated[str, id_path("Your id for the reminder", "lunch")]


# --- who may call: the principal the middleware authenticated
# Every dependency here is ``async def`` though none awaits: FastAPI runs a plain ``def``
# dependency in its thread pool, a thread hop per dependency per request (a tenth of
# the event loop's time on a per-item PUT, by py-spy).

api_key_scheme = APIKeyHeader(
    name="X-API-Key",
    scheme_name="ApiKey",
    description="The admin API key (TEPAT_ADMIN_API_KEY): reaches every endpoint; or an"
    " app key (TEPAT_APP_KEYS): reaches the events API only.",
    auto_error=False,
)
bearer_scheme = HTTPBearer(
    scheme_name="UserToken",
    bearerFormat="JWT",
    description="End-user JWT (HS256, `sub` = user id, `exp` required): "
    "reaches only `/v1/users/{sub}/…`.",
    auto_error=False,
)


def _principal(request: Request) -> Principal:
    principal = request.scope.get("state", {}).get("principal")
    if not isinstance(principal, Principal):  # the middleware is missing: fail closed
        raise AuthError(401, "credentials required")
    return principal


async def _current_principal(
    request: Request,
    _api_key: Annotated[str | None, Depends(api_key_scheme)],
    _bearer: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer_scheme)],
) -> Principal:
    """Admin or user (the scheme parameters only document both for OpenAPI)."""
    return _principal(request)


Caller = Annotated[Principal, Depends(_current_principal)]


async def _user_access(
    user_id: Annotated[
        str, id_path("Your own id for the user (letters, digits and ._:@-)", "user-42")
    ],
    principal: Caller,
) -> str:
    if not principal.may_reach_user(user_id):
        raise AuthError(403, OWN_USER_ONLY)
    return user_id


# The path's user id, once the caller may reach it.
UserId = Annotated[str, Depends(_user_access)]


def _key_access(may: Callable[[Principal], bool], refusal: str) -> Any:
    """The caller's principal, when it sent an ``X-API-Key`` that ``may`` reach the
    route (403 ``refusal`` otherwise)."""

    async def access(
        request: Request, _api_key: Annotated[str | None, Depends(api_key_scheme)]
    ) -> Principal:
        principal = _principal(request)
        if not may(principal):
            raise AuthError(403, refusal)
        return principal

    return Depends(access)


_admin = _key_access(lambda p: p.admin, ADMIN_ONLY)
Admin = Annotated[Principal, _admin]
# The admin key or an app key (TEPAT_APP_KEYS): the events API.
EventsCaller = Annotated[
    Principal,
    _key_access(
        lambda p: p.user_id is None, "the events API needs the X-API-Key (admin or app key)"
    ),
]


# --- the shapes routes share


def user_router(resource: str, tag: str) -> APIRouter:
    """The routes of ``/v1/users/{user_id}<resource>``: 404 when there is no such user."""
    return APIRouter(
        prefix=f"/v1/users/{{user_id}}{resource}",
        tags=[tag],
        responses=problem_responses(404),
    )


def admin_router(resource: str, tag: str, **more: Any) -> APIRouter:
    """The routes of ``/v1/<resource>``, for the admin API key only."""
    return APIRouter(prefix=f"/v1/{resource}", tags=[tag], dependencies=[_admin], **more)


def answer_created(response: Response, created: bool) -> None:
    """201 when the call created the resource, 200 when it was already there (a retry,
    a replacement or an identical copy)."""
    response.status_code = 201 if created else 200
