"""Twilio calls in: SMS status callbacks and inbound replies (STOP/START).

No API key or user token here (a provider cannot send ours: api/auth.py lets
``/v1/providers/`` through); instead every request must carry a valid
``X-Twilio-Signature`` for the URL Twilio called and the form it posted, keyed by
``TEPAT_TWILIO_AUTH_TOKEN`` (tepat/adapters/twilio_signature.py). A missing or bad
signature gets 403 problem+json and changes nothing.

The URL Twilio called is ``TEPAT_PUBLIC_URL`` + this path + the query string when the
public URL is set (behind a proxy or a TLS terminator the request this process sees has
another scheme, host or port), else the request's own URL.

Twilio re-sends nothing on a 2xx, and may on a failure, so anything that is not an
authentication problem or malformed input answers 2xx: an unknown message id is logged
and answered 200 (the message may be gone; retrying would not bring it back).
"""

from __future__ import annotations

from typing import Annotated, Any
from urllib.parse import parse_qsl

import structlog
from fastapi import APIRouter, Query, Request, Response

from api.deps import RT
from api.problems import ProblemError
from tepat.adapters.twilio_signature import valid_twilio_signature
from tepat.domain.errors import DomainError
from tepat.runtime import Runtime
from tepat.services.twilio_callbacks import StatusCallback, apply_inbound, apply_status

log = structlog.get_logger("tepat.api")
router = APIRouter(prefix="/v1/providers/twilio", tags=["providers"])

# An empty TwiML document: no reply of ours (Twilio answers STOP/START itself).
EMPTY_TWIML = '<?xml version="1.0" encoding="UTF-8"?><Response></Response>'

_SIGNED: dict[int | str, dict[str, Any]] = {
    403: {"description": "X-Twilio-Signature missing or not Twilio's for this URL and form"},
}


def called_url(request: Request, rt: Runtime) -> str:
    """The URL Twilio requested, as it signed it."""
    public = rt.settings.public_url
    if not public:
        return str(request.url)
    query = request.url.query
    return public.rstrip("/") + request.url.path + (f"?{query}" if query else "")


async def _signed_form(request: Request, rt: Runtime) -> dict[str, str]:
    """The posted form, when the signature holds (403 otherwise)."""
    token = rt.settings.twilio_auth_token
    if token is None:
        raise ProblemError(403, "Twilio is not configured here (TEPAT_TWILIO_AUTH_TOKEN)")
    raw = (await request.body()).decode("utf-8", "replace")
    pairs = parse_qsl(raw, keep_blank_values=True)
    url = called_url(request, rt)
    signature = request.headers.get("x-twilio-signature")
    if not valid_twilio_signature(token.get_secret_value(), url, pairs, signature):
        log.warning(
            "Twilio callback refused: bad or missing signature",
            path=request.url.path,
            signed=signature is not None,
            url=url,
        )
        raise ProblemError(
            403,
            "X-Twilio-Signature is missing or does not match this URL and form"
            + ("" if rt.settings.public_url else " (behind a proxy? set TEPAT_PUBLIC_URL)"),
        )
    return dict(pairs)


@router.post(
    "/status",
    summary="Twilio SMS status callback (signed by Twilio; no API key)",
    responses={**_SIGNED, 422: {"description": "MessageSid or MessageStatus missing"}},
)
async def twilio_status(
    request: Request,
    rt: RT,
    m: Annotated[str | None, Query(description="Tepat's message id (set by Tepat)")] = None,
) -> Response:
    """Moves the SMS forward: ``delivered``, or ``failed`` with ``twilio_<ErrorCode>``.
    Forward-only and deduplicated: a repeated or older callback changes nothing."""
    form = await _signed_form(request, rt)
    try:
        callback = StatusCallback.from_params(m, form)
    except DomainError as e:
        raise ProblemError(422, e.message, e.field, field_in_detail=False) from None
    outcome = await apply_status(rt.store, rt.clock, callback)
    return Response(status_code=200, headers={"X-Tepat-Outcome": str(outcome)})


@router.post(
    "/inbound",
    summary="Twilio inbound SMS (signed by Twilio; no API key): STOP and START",
    responses=_SIGNED,
)
async def twilio_inbound(request: Request, rt: RT) -> Response:
    """STOP, STOPALL, UNSUBSCRIBE, CANCEL, END, QUIT suppress the sender's number for
    SMS; START, YES, UNSTOP lift that. Anything else is ignored. Answers empty TwiML."""
    form = await _signed_form(request, rt)
    reply = await apply_inbound(rt.store, rt.clock, form)
    return Response(
        EMPTY_TWIML,
        media_type="text/xml",
        headers={"X-Tepat-Outcome": str(reply)},
    )
