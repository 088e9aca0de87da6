"""``/u/{token}``: one-click unsubscribe (RFC 8058), no login: the signed token is the key.

- ``POST`` (what Gmail and Yahoo send from their "Unsubscribe" button, body
  ``List-Unsubscribe=One-Click``, form-encoded; any body or none is accepted): a valid
  token opts its user out of its category on its channel and answers 200. Repeating it
  changes nothing more.
- ``GET`` (a person following the link; a mail client that has no one-click support): a
  page naming what will stop, with one button that POSTs. A GET never unsubscribes: link
  scanners and previews fetch every URL in a message.

A malformed token is 400, a forged one 403, an expired one 410 (problem+json naming
``token``, or a short HTML page for a browser), and nothing changes. Without
``TEPAT_UNSUBSCRIBE_SECRET`` (no e-mail channel) the path is 404.

The responses say ``Cache-Control: no-store`` and ``Referrer-Policy: no-referrer`` (the
token is in the URL), and forbid framing (the page's button must not be clickjacked).
"""

from __future__ import annotations

import html
from typing import Annotated

import structlog
from fastapi import APIRouter, Path, Request
from fastapi.responses import HTMLResponse, JSONResponse, Response
from pydantic import BaseModel, Field

from api.deps import RT, service_of
from api.problems import field_problem, problem_response, problem_responses
from tepat.domain.errors import DomainError
from tepat.domain.unsubscribe import MAX_TOKEN_CHARS, TokenExpired, TokenForged, UnsubscribeClaim
from tepat.services.unsubscribe import UnsubscribeLinks, opt_out

log = structlog.get_logger("tepat.unsubscribe")
router = APIRouter(tags=["unsubscribe"])

# No length or pattern here: whatever the path holds, the token's own check answers
# (400 malformed), not the framework's 422.
Token = Annotated[
    str,
    Path(description=f"The signed token of an unsubscribe link (at most {MAX_TOKEN_CHARS})"),
]

_HEADERS = {
    "Cache-Control": "no-store",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    "Content-Security-Policy": (
        "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; frame-ancestors 'none'"
    ),
}


class Unsubscribed(BaseModel):
    unsubscribed: bool = Field(description="True: that category is off on that channel")
    category: str
    channel: str


@router.post(
    "/u/{token}",
    response_model=Unsubscribed,
    responses=problem_responses(400, 403, 404, 410, 422),
    summary="One-click unsubscribe (RFC 8058)",
)
async def unsubscribe(token: Token, request: Request, rt: RT) -> Response:
    """Opts the token's user out of its category on its channel. The body is ignored
    (RFC 8058's is ``List-Unsubscribe=One-Click``)."""
    claim = _claim(request, token)
    if isinstance(claim, Response):
        return claim
    done = await opt_out(rt.store, claim)
    log.info(
        "unsubscribed",
        user_id=claim.user_id,
        category=claim.category,
        channel=claim.channel,
        known_user=done.known_user,
    )
    if _wants_html(request):
        return HTMLResponse(_page_done(claim), headers=_HEADERS)
    body = Unsubscribed(unsubscribed=True, category=claim.category, channel=claim.channel)
    return JSONResponse(body.model_dump(), headers=_HEADERS)


# A page for people, not part of the API's document (like /dashboard).
@router.get("/u/{token}", response_class=HTMLResponse, include_in_schema=False)
async def unsubscribe_page(token: Token, request: Request) -> Response:
    claim = _claim(request, token)
    if isinstance(claim, Response):
        return claim
    return HTMLResponse(_page_confirm(claim), headers=_HEADERS)


def _claim(request: Request, token: str) -> UnsubscribeClaim | Response:
    """The token's claim, or the answer refusing it (404 where links are not enabled)."""
    links: UnsubscribeLinks | None = service_of(request, "unsubscribe")
    if links is None:
        return problem_response(404, "unsubscribe links are not enabled on this server")
    try:
        return links.read(token)
    except DomainError as e:
        return _refused(request, e)


# A token that does not parse (any other DomainError) is 400.
_REFUSED_STATUS: dict[type[DomainError], int] = {TokenForged: 403, TokenExpired: 410}


def _refused(request: Request, e: DomainError) -> Response:
    status = _REFUSED_STATUS.get(type(e), 400)
    log.info("unsubscribe_refused", status=status, reason=e.message)
    if _wants_html(request):
        text = "This unsubscribe link is not valid."
        if status == 410:
            text = "This unsubscribe link has expired. Use the link in a more recent message."
        return HTMLResponse(_page("Unsubscribe", f"<p>{text}</p>"), status, headers=_HEADERS)
    return field_problem(status, e.field, e.message, headers=_HEADERS)


def _wants_html(request: Request) -> bool:
    return "text/html" in request.headers.get("accept", "")


def _what(claim: UnsubscribeClaim) -> str:
    kind = {"email": "e-mails", "sms": "text messages", "push": "notifications"}.get(
        claim.channel, f"{claim.channel} messages"
    )
    return f"<strong>{html.escape(claim.category)}</strong> {html.escape(kind)}"


def _page_confirm(claim: UnsubscribeClaim) -> str:
    return _page(
        "Unsubscribe",
        f"<p>Stop receiving {_what(claim)}?</p>"
        '<form method="post"><input type="hidden" name="List-Unsubscribe" value="One-Click">'
        '<button type="submit">Unsubscribe</button></form>',
    )


def _page_done(claim: UnsubscribeClaim) -> str:
    return _page(
        "Unsubscribed",
        f"<p>You will no longer receive {_what(claim)}.</p>"
        "<p>Other messages, and this category on other channels, are not affected.</p>",
    )


def _page(title: str, body: str) -> str:
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{title}</title>"
        "<style>body{font-family:system-ui,sans-serif;max-width:32rem;margin:4rem auto;"
        "padding:0 1rem;line-height:1.5}button{font-size:1rem;padding:.5rem 1.25rem}</style>"
        f"</head><body><h1>{title}</h1>{body}</body></html>"
    )
