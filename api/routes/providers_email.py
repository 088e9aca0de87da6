"""``POST /v1/providers/email/events``: bounces, complaints and deliveries from the e-mail
provider, no API key (the auth middleware lets ``/v1/providers/`` through): each request
proves itself by a signature, or gets 403 and changes nothing.

Two ways in:

- **SES over SNS** (no ``X-Tepat-Signature`` header): the body is an SNS message. Its
  signature is checked against SNS's certificate (``SignatureVersion`` 1 and 2, the
  certificate only from ``https://sns.<region>.amazonaws.com/…``), and its ``TopicArn``
  must be one of ``TEPAT_EMAIL_EVENTS_TOPIC_ARNS``. A ``SubscriptionConfirmation`` is
  confirmed by GETting its ``SubscribeURL`` (SNS's host only); a ``Notification``
  carries the SES event in ``Message``, deduplicated by the SNS ``MessageId``.
- **A self-hosted relay** (``X-Tepat-Signature: sha256=<hex>``, HMAC-SHA256 of the raw
  body under ``TEPAT_EMAIL_EVENTS_SECRET``): the body is the SES event itself, with an
  optional ``eventId`` to deduplicate on (else the provider's message id and the type).

Answers: 200 with what was done (``applied``, ``duplicate``, ``not_ours``, ``ignored``,
``confirmed``), also for events of unknown types or with unknown fields; 400 for a body
that is not JSON; 403 for a bad or missing signature, a certificate from elsewhere, a
topic not ours; 503 when SNS's certificate or confirmation URL cannot be reached now
(SNS retries).
"""

from __future__ import annotations

import hashlib
import hmac
import json
from typing import Any

import httpx
import structlog
from fastapi import APIRouter, Request
from pydantic import BaseModel, Field

from api.app_services import EmailEventsEndpoint
from api.deps import service_of
from api.problems import ProblemError, problem_responses
from tepat.adapters.sns_verify import CertificateUnavailable
from tepat.domain import sns
from tepat.domain.email_events import parse_ses_event

log = structlog.get_logger("tepat.email_events")

PATH = "/v1/providers/email/events"
# SNS messages are at most 256 KiB; the envelope and escaping add some.
MAX_BODY_BYTES = 320 * 1024
SIGNATURE_HEADER = "x-tepat-signature"
PROVIDER_SES = "ses"
PROVIDER_RELAY = "relay"

router = APIRouter(tags=["providers"])


class EventAnswer(BaseModel):
    result: str = Field(
        description="applied, duplicate, not_ours (no Tepat e-mail by that id), ignored"
        " (a type that changes nothing), confirmed (an SNS subscription)"
    )


@router.post(
    PATH,
    responses=problem_responses(400, 403, 413, 422, 503),
    summary="E-mail status events (SES over SNS, or a signed relay)",
)
async def email_events(request: Request) -> EventAnswer:
    """Bounce (permanent: the message ``failed``, the address suppressed), Complaint
    (the address suppressed), Delivery (the message ``delivered``); each once, forward
    only. See the module docstring for the two signatures."""
    endpoint: EmailEventsEndpoint = service_of(request, "email_events")
    body = await request.body()
    signature = request.headers.get(SIGNATURE_HEADER)
    if signature is not None:
        return EventAnswer(result=await _from_relay(endpoint, body, signature))
    return EventAnswer(result=await _from_sns(endpoint, body))


async def _from_relay(endpoint: EmailEventsEndpoint, body: bytes, signature: str) -> str:
    if endpoint.secret is None:
        raise ProblemError(403, "signed relay events are not enabled here", SIGNATURE_HEADER)
    expected = hmac.new(endpoint.secret, body, hashlib.sha256).hexdigest()
    given = signature.strip().removeprefix("sha256=")
    if not hmac.compare_digest(given.encode(), expected.encode()):
        raise ProblemError(403, "the signature does not match the body", SIGNATURE_HEADER)
    doc = _body_json(body)
    event = parse_ses_event(doc)
    event_id = doc.get("eventId") if isinstance(doc, dict) else None
    if not isinstance(event_id, str) or not event_id or len(event_id) > 256:
        event_id = event.dedup_id()
    if event_id is None:
        log.info("email_event_without_id", provider=PROVIDER_RELAY, type=event.type_name)
        return "ignored"
    return (await endpoint.events.apply(PROVIDER_RELAY, event_id, event)).outcome


async def _from_sns(endpoint: EmailEventsEndpoint, body: bytes) -> str:
    doc = _body_json(body)
    try:
        message = sns.parse_message(doc)
        if not endpoint.topics:
            raise sns.SnsRefused(
                "TopicArn", "no SNS topic is allowed here (TEPAT_EMAIL_EVENTS_TOPIC_ARNS)"
            )
        sns.check_topic(message, endpoint.topics)
        await endpoint.verifier.verify(message)
    except sns.SnsRefused as e:
        log.warning("sns_message_refused", field=e.field, reason=e.message)
        raise ProblemError(403, e.message, e.field) from None
    except CertificateUnavailable:
        raise ProblemError(503, "SNS's signing certificate cannot be fetched now") from None
    if message.type == sns.SUBSCRIPTION_CONFIRMATION:
        try:
            await endpoint.verifier.confirm(message)
        except sns.SnsRefused as e:
            raise ProblemError(403, e.message, e.field) from None
        except (httpx.HTTPError, ValueError, OSError) as e:
            log.warning("sns_confirmation_failed", topic=message.topic_arn, error=str(e))
            raise ProblemError(503, "the subscription could not be confirmed now") from None
        log.info("sns_subscription_confirmed", topic=message.topic_arn)
        return "confirmed"
    if message.type != sns.NOTIFICATION:
        log.info("sns_message", type=message.type, topic=message.topic_arn)
        return "ignored"
    inner = _json(message.message.encode())
    if inner is None:
        # Signed by SNS on our topic, but not an SES event: nothing to do, and nothing
        # SNS could fix by sending it again.
        log.warning("sns_notification_not_json", message_id=message.message_id)
        return "ignored"
    inner_event = parse_ses_event(inner)
    return (await endpoint.events.apply(PROVIDER_SES, message.message_id, inner_event)).outcome


def _json(body: bytes) -> Any | None:
    try:
        return json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        return None


def _body_json(body: bytes) -> Any:
    doc = _json(body)
    if doc is None:
        raise ProblemError(400, "not a JSON document", "body")
    return doc
