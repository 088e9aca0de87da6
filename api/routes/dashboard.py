"""``/dashboard``: the operator dashboard (admin key only), plain HTML + JS polling.

- ``GET /dashboard``: the page (a session cookie, else a redirect to the login form);
- ``GET|POST /dashboard/login``: the form that trades the admin key for a
  session cookie (``api/dashboard_session.py``); ``POST /dashboard/logout``;
- ``GET /dashboard/data``: the figures as JSON (``tepat/services/dashboard.py``),
  polled by the page every two seconds;
- ``GET /dashboard/messages?id=…`` or ``?user=…``: the find form (a message by id,
  or a user's newest ``FIND_LIMIT``), from the store's own queries;
- ``POST /dashboard/dead-letters/{id}/replay``: the replay button.

The JSON endpoints take the session cookie (with the CSRF token on the POST)
or ``X-API-Key``, so a script can read the same figures. The login form and
the two static files (this repository's JS and CSS, no data) are the only
things served without credentials.
"""

from __future__ import annotations

import html
from pathlib import Path
from typing import Annotated
from urllib.parse import parse_qs

from fastapi import APIRouter, Depends, FastAPI, HTTPException, Query, Request
from fastapi.encoders import jsonable_encoder
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response

from api.auth import AuthError, TooManyFailures
from api.dashboard_session import (
    CSRF_HEADER,
    Session,
    Sessions,
    clear_cookie,
    set_cookie,
)
from api.deps import RT, app_state
from api.routes import admin
from api.routes.admin import DeadLetterId
from api.schemas import MessageOut, ReplayOut
from api.throttle import FailureThrottle, client_ip
from tepat.domain.models import Message
from tepat.domain.validation import IDENTIFIER_PATTERN
from tepat.ports.repositories.messages import MessageQuery
from tepat.runtime import Runtime
from tepat.services.accounts import NotFound
from tepat.services.dashboard import Dashboard

STATIC = Path(__file__).resolve().parent.parent / "static"
_ASSETS = {
    "dashboard.js": "text/javascript; charset=utf-8",
    "dashboard.css": "text/css; charset=utf-8",
}
_SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; "
    "img-src 'self'; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; "
    "base-uri 'none'",
    "X-Frame-Options": "DENY",  # the replay button must not be clickable through a frame
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}
_CHALLENGE = 'ApiKey realm="tepat" header="X-API-Key"'
# A user's newest messages the find form shows: a glance, not a listing (the API pages).
FIND_LIMIT = 20
_Identifier = Annotated[str | None, Query(min_length=1, max_length=128, pattern=IDENTIFIER_PATTERN)]

router = APIRouter(prefix="/dashboard", include_in_schema=False)


def install(app: FastAPI, rt: Runtime, admin_key: str) -> None:
    app.state.dashboard = Dashboard(
        rt.store,
        rt.broker,
        rt.categories,
        rt.clock,
        channels=rt.channels,
        push_providers=sorted(rt.push_kinds),
    )
    app.state.dashboard_sessions = Sessions(admin_key, rt.clock, rt.store)
    app.include_router(router)


SessionsDep = Annotated[Sessions, app_state("dashboard_sessions")]
DashboardDep = Annotated[Dashboard, app_state("dashboard")]
Throttle = Annotated[FailureThrottle, app_state("auth_throttle")]


async def access(request: Request, sessions: SessionsDep, throttle: Throttle) -> Session | None:
    """The caller's session; None when it sent the admin key in ``X-API-Key``."""
    key = request.headers.get("x-api-key")
    if key is not None:
        ip = client_ip(request.scope.get("client"))
        if (wait := throttle.retry_after(ip)) is not None:
            raise TooManyFailures(wait)
        if not sessions.key_ok(key):
            throttle.failed(ip)
            raise AuthError(401, "invalid API key", _CHALLENGE)
        return None
    session = await sessions.read(request)
    if session is None:
        raise AuthError(401, "log in at /dashboard/login, or send X-API-Key", _CHALLENGE)
    return session


Access = Annotated[Session | None, Depends(access)]


def changing_access(request: Request, sessions: SessionsDep, session: Access) -> None:
    """:func:`access`, plus the CSRF token when the credential is the cookie."""
    if session is not None and not sessions.csrf_ok(session, request.headers.get(CSRF_HEADER)):
        raise AuthError(403, "missing or wrong X-CSRF-Token: reload the dashboard")


# --- pages


@router.get("")
async def page(request: Request, sessions: SessionsDep) -> Response:
    session = await sessions.read(request)
    if session is None:
        return RedirectResponse("/dashboard/login", status_code=303)
    body = _template("dashboard.html").replace("{{csrf}}", sessions.csrf_token(session))
    return HTMLResponse(body, headers=_SECURITY_HEADERS)


@router.get("/login")
async def login_form(request: Request, sessions: SessionsDep) -> Response:
    if await sessions.read(request) is not None:
        return RedirectResponse("/dashboard", status_code=303)
    return _login_page()


@router.post("/login")
async def login(request: Request, sessions: SessionsDep, throttle: Throttle) -> Response:
    ip = client_ip(request.scope.get("client"))
    if (wait := throttle.retry_after(ip)) is not None:
        page = _login_page("Too many wrong keys: try again in a minute.", status=429)
        page.headers["Retry-After"] = str(wait)
        return page
    if not sessions.key_ok((await _form_value(request, "key")).strip()):
        throttle.failed(ip)
        return _login_page("That is not the admin key.", status=401)
    response = RedirectResponse("/dashboard", status_code=303)
    set_cookie(request, response, sessions.issue())
    return response


@router.post("/logout")
async def logout(request: Request, sessions: SessionsDep) -> Response:
    # A plain form post: the token travels in the form rather than a header.
    session = await sessions.read(request)
    if session is not None:
        if not sessions.csrf_ok(session, await _form_value(request, "csrf")):
            raise AuthError(403, "missing or wrong CSRF token: reload the dashboard")
        await sessions.revoke(session)
    response = RedirectResponse("/dashboard/login", status_code=303)
    clear_cookie(request, response)
    return response


@router.get("/static/{name}")
async def asset(name: str) -> Response:
    media_type = _ASSETS.get(name)
    if media_type is None:
        raise NotFound("file", name)
    headers = {"Cache-Control": "no-cache", "X-Content-Type-Options": "nosniff"}
    return Response((STATIC / name).read_bytes(), media_type=media_type, headers=headers)


# --- data and actions


@router.get("/data")
async def data(dashboard: DashboardDep, _: Access) -> JSONResponse:
    snapshot = await dashboard.snapshot()
    body = jsonable_encoder(snapshot)
    body["devices_deactivated_total"] = snapshot.devices_deactivated_total
    return JSONResponse(body, headers={"Cache-Control": "no-store"})


@router.get("/messages")
async def find_messages(
    rt: RT,
    _: Access,
    id: _Identifier = None,
    user: _Identifier = None,
) -> JSONResponse:
    """One message by id, or a user's newest (scheduled) first; an empty list when none."""
    if (id is None) == (user is None):
        raise HTTPException(422, "give exactly one of id and user")
    found: list[Message]
    if id is not None:
        message = await rt.store.get_message(id)
        found = [] if message is None else [message]
    else:
        assert user is not None
        found = (await rt.store.list_messages(MessageQuery(user, limit=FIND_LIMIT))).items
    body = [{"user_id": m.user_id, **MessageOut.of(m).model_dump(mode="json")} for m in found]
    return JSONResponse(
        {"messages": body, "limit": FIND_LIMIT}, headers={"Cache-Control": "no-store"}
    )


@router.post("/dead-letters/{dead_letter_id}/replay")
async def replay(
    dead_letter_id: DeadLetterId,
    rt: RT,
    dashboard: DashboardDep,
    _: Annotated[None, Depends(changing_access)],
) -> ReplayOut:
    replayed = await admin.replay(dead_letter_id, rt)
    dashboard.invalidate()
    return replayed


async def _form_value(request: Request, name: str) -> str:
    form = parse_qs((await request.body()).decode("utf-8", errors="replace"))
    return (form.get(name) or [""])[0]


def _login_page(error: str | None = None, status: int = 200) -> HTMLResponse:
    message = f'<p class="error" role="alert">{html.escape(error)}</p>' if error else ""
    body = _template("login.html").replace("{{error}}", message)
    return HTMLResponse(body, status_code=status, headers=_SECURITY_HEADERS)


def _template(name: str) -> str:
    return (STATIC / name).read_text(encoding="utf-8")
