"""``POST /v1/providers/email/events``: SES events over SNS (signed by a key and
certificate made here, served by an injected fetcher) and from a relay signed with a
shared secret. Forward-only, once per event, 403 and no change for a bad signature."""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import hmac
import json
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import Any, cast

import httpx
import pytest
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import padding
from pydantic import SecretStr

from tepat.adapters.sns_verify import SnsVerifier
from tepat.clock import FakeClock
from tepat.domain.contacts import SuppressionReason
from tepat.domain.models import Message, MessageStatus, slot_key_for
from tepat.domain.sns import SnsMessage, parse_message, string_to_sign
from tepat.ports.store import Store
from tepat.runtime import Runtime
from tepat.services.email_events import EmailEvents
from tests.api.conftest import START, STORES, make_settings, problem, runtime_on
from tests.support.dies_once import Died, DiesOnce
from tests.support.fake_push import FakePush
from tests.support.messages import make_message
from tests.support.selfsigned import SelfSigned, self_signed

PATH = "/v1/providers/email/events"
TOPIC = "arn:aws:sns:eu-west-1:123456789012:ses-events"
CERT_URL = "https://sns.eu-west-1.amazonaws.com/SimpleNotificationService-0123.pem"
SUBSCRIBE_URL = "https://sns.eu-west-1.amazonaws.com/?Action=ConfirmSubscription&TopicArn=x&Token=t"
RELAY_SECRET = "relay-secret-0123456789abcdef0123456789abcdef"
ADDRESS = "ana@example.com"


@pytest.fixture(scope="module")
def signer() -> SelfSigned:
    return self_signed("sns.amazonaws.com", tls_server=False)


class Fetcher:
    """The injected GET: SNS's certificate at CERT_URL, a confirmation at SubscribeURL."""

    def __init__(self, cert_pem: bytes) -> None:
        self.cert_pem = cert_pem
        self.calls: list[str] = []
        self.fail = False

    async def __call__(self, url: str) -> bytes:
        self.calls.append(url)
        if self.fail:
            raise httpx.ConnectError("unreachable")
        if url == CERT_URL:
            return self.cert_pem
        return b"<ConfirmSubscriptionResponse/>"


@pytest.fixture(params=STORES)
async def rt(
    request: pytest.FixtureRequest, tmp_path: Path, clock: FakeClock, push: FakePush
) -> AsyncIterator[Runtime]:
    settings = make_settings(tmp_path).model_copy(
        update={
            "email_events_topic_arns": TOPIC,
            "email_events_secret": SecretStr(RELAY_SECRET),
        }
    )
    async with runtime_on(
        request.param, tmp_path, clock, push, "tepat_email_events", settings
    ) as r:
        yield r


@pytest.fixture
def fetcher(signer: SelfSigned, app: Any) -> Fetcher:
    f = Fetcher(signer.cert_pem)
    app.state.email_events.verifier = SnsVerifier(f)
    return f


def email_message(key: str, user_id: str = "u1") -> Message:
    m = make_message(
        f"test|{key}",
        user_id=user_id,
        category="custom",
        title="Invoice overdue",
        body="Please pay",
        scheduled_at=START,
        channel="email",
        nominal_at=START,
        due_at=START,
    )
    return dataclasses.replace(m, slot_key=slot_key_for(m))


async def sent_email(rt: Runtime, key: str = "m1") -> Message:
    """An e-mail ``sent`` to ADDRESS, its user's contact (the message's recipient)."""
    m = email_message(key)
    await rt.store.set_contact(m.user_id, "email", ADDRESS, True, rt.clock.now())
    await rt.store.insert_messages([m])
    assert await rt.store.claim([m.id], rt.clock.now())
    assert await rt.store.transition(
        m.id, MessageStatus.SENT, rt.clock.now(), expect=[MessageStatus.SENDING]
    )
    return m


async def status(rt: Runtime, m: Message) -> tuple[MessageStatus, str | None]:
    got = await rt.store.get_message(m.id)
    assert got is not None
    return got.status, got.status_reason


async def suppressed(rt: Runtime, address: str = ADDRESS) -> SuppressionReason | None:
    found = await rt.store.suppressions_for("email", [address])
    return found[address].reason if address in found else None


def ses_event(kind: str, message_id: str | None, **extra: Any) -> dict[str, Any]:
    headers = [{"name": "X-Tepat-Message-Id", "value": message_id}] if message_id else []
    doc: dict[str, Any] = {
        "notificationType": kind,
        "mail": {
            "timestamp": "2027-03-01T00:00:00.000Z",
            "messageId": "0100018f-ses-id",
            "source": "no-reply@shop.example",
            "destination": [ADDRESS],
            "headers": headers,
            "commonHeaders": {"messageId": "<0100018f-ses-id@eu-west-1.amazonses.com>"},
        },
    }
    if kind == "Bounce":
        doc["bounce"] = {
            "bounceType": extra.pop("bounce_type", "Permanent"),
            "bounceSubType": "General",
            "bouncedRecipients": [
                {"emailAddress": ADDRESS, "status": "5.1.1", "diagnosticCode": "smtp; 550 5.1.1"}
            ],
        }
    elif kind == "Complaint":
        doc["complaint"] = {
            "complainedRecipients": [{"emailAddress": ADDRESS}],
            "complaintFeedbackType": "abuse",
        }
    elif kind == "Delivery":
        doc["delivery"] = {"recipients": [ADDRESS], "smtpResponse": "250 2.0.0 OK"}
    doc.update(extra)
    return doc


def sns_envelope(
    signer: SelfSigned,
    message: str,
    *,
    sns_id: str = "sns-1",
    kind: str = "Notification",
    version: str = "1",
    topic: str = TOPIC,
    cert_url: str = CERT_URL,
    subject: str | None = None,
    **extra: str,
) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "Type": kind,
        "MessageId": sns_id,
        "TopicArn": topic,
        "Message": message,
        "Timestamp": "2027-03-01T00:00:01.000Z",
        "SignatureVersion": version,
        "SigningCertURL": cert_url,
        "UnsubscribeURL": "https://sns.eu-west-1.amazonaws.com/?Action=Unsubscribe",
        **extra,
    }
    if subject is not None:
        doc["Subject"] = subject
    return sign(signer, doc)


def sign(signer: SelfSigned, doc: dict[str, Any]) -> dict[str, Any]:
    doc = {**doc, "Signature": "AAAA"}
    parsed: SnsMessage = parse_message(doc)
    algorithm = hashes.SHA1() if doc["SignatureVersion"] == "1" else hashes.SHA256()
    raw = signer.key.sign(string_to_sign(parsed), padding.PKCS1v15(), algorithm)
    return {**doc, "Signature": base64.b64encode(raw).decode()}


async def post_sns(client: httpx.AsyncClient, doc: dict[str, Any]) -> httpx.Response:
    return await client.post(
        PATH,
        content=json.dumps(doc),
        headers={"content-type": "text/plain; charset=UTF-8", "x-amz-sns-message-type": "x"},
    )


async def post_relay(
    client: httpx.AsyncClient, doc: dict[str, Any], secret: str = RELAY_SECRET
) -> httpx.Response:
    body = json.dumps(doc).encode()
    mac = hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    return await client.post(PATH, content=body, headers={"X-Tepat-Signature": f"sha256={mac}"})


async def test_delivery_over_sns_v1_moves_sent_to_delivered_once(
    client: httpx.AsyncClient, rt: Runtime, signer: SelfSigned, fetcher: Fetcher
) -> None:
    m = await sent_email(rt)
    doc = sns_envelope(signer, json.dumps(ses_event("Delivery", m.id)), subject="Delivery")
    r = await post_sns(client, doc)
    assert r.status_code == 200, r.text
    assert r.json() == {"result": "applied"}
    assert await status(rt, m) == (MessageStatus.DELIVERED, None)
    again = await post_sns(client, doc)
    assert again.json() == {"result": "duplicate"}
    assert fetcher.calls == [CERT_URL]  # the certificate is cached


async def test_permanent_bounce_over_sns_v2_fails_the_message_and_suppresses(
    client: httpx.AsyncClient, rt: Runtime, signer: SelfSigned, fetcher: Fetcher
) -> None:
    m = await sent_email(rt)
    doc = sns_envelope(signer, json.dumps(ses_event("Bounce", m.id)), version="2")
    r = await post_sns(client, doc)
    assert r.json() == {"result": "applied"}
    assert await status(rt, m) == (MessageStatus.FAILED, "hard_bounce")
    assert await suppressed(rt) == SuppressionReason.HARD_BOUNCE


async def test_sns_retry_after_a_death_before_the_record_still_suppresses(
    client: httpx.AsyncClient, app: Any, rt: Runtime, signer: SelfSigned, fetcher: Fetcher
) -> None:
    """The process dies after acting on a complaint, before recording it: SNS saw no
    answer and delivers it again, which lands it once and records it."""
    m = await sent_email(rt)
    endpoint = app.state.email_events
    doc = sns_envelope(signer, json.dumps(ses_event("Complaint", m.id)), sns_id="sns-died")
    endpoint.events = EmailEvents(
        cast(Store, DiesOnce(rt.store, "record_provider_event")), rt.clock
    )
    with pytest.raises(Died):
        await post_sns(client, doc)
    assert await suppressed(rt) == SuppressionReason.COMPLAINT
    endpoint.events = EmailEvents(rt.store, rt.clock)  # a process that lives
    assert (await post_sns(client, doc)).json() == {"result": "applied"}
    assert await suppressed(rt) == SuppressionReason.COMPLAINT
    assert len(await rt.store.list_suppressions("email", None, 10)) == 1
    assert (await post_sns(client, doc)).json() == {"result": "duplicate"}


async def test_transient_bounce_changes_nothing(
    client: httpx.AsyncClient, rt: Runtime, signer: SelfSigned, fetcher: Fetcher
) -> None:
    m = await sent_email(rt)
    event = ses_event("Bounce", m.id, bounce_type="Transient")
    r = await post_sns(client, sns_envelope(signer, json.dumps(event)))
    assert r.json() == {"result": "applied"}
    assert await status(rt, m) == (MessageStatus.SENT, None)
    assert await suppressed(rt) is None


async def test_complaint_suppresses_at_once_and_leaves_the_status(
    client: httpx.AsyncClient, rt: Runtime, signer: SelfSigned, fetcher: Fetcher
) -> None:
    m = await sent_email(rt)
    r = await post_sns(client, sns_envelope(signer, json.dumps(ses_event("Complaint", m.id))))
    assert r.json() == {"result": "applied"}
    assert await suppressed(rt) == SuppressionReason.COMPLAINT
    assert await status(rt, m) == (MessageStatus.SENT, None)


async def test_a_complaint_about_another_address_suppresses_nothing(
    client: httpx.AsyncClient, rt: Runtime, signer: SelfSigned, fetcher: Fetcher
) -> None:
    """Validly signed, about a Tepat e-mail, but naming an address that is not the
    message's recipient: neither that address nor the recipient is suppressed."""
    m = await sent_email(rt)
    doc = ses_event("Complaint", m.id)
    doc["complaint"]["complainedRecipients"] = [{"emailAddress": "victim@example.org"}]
    r = await post_sns(client, sns_envelope(signer, json.dumps(doc)))
    assert r.status_code == 200
    assert await suppressed(rt, "victim@example.org") is None
    assert await suppressed(rt) is None
    bounce = ses_event("Bounce", m.id)
    bounce["bounce"]["bouncedRecipients"].append({"emailAddress": "other@example.org"})
    r = await post_sns(client, sns_envelope(signer, json.dumps(bounce), sns_id="b-1"))
    assert r.json() == {"result": "applied"}
    assert await suppressed(rt, "other@example.org") is None
    assert await suppressed(rt) == SuppressionReason.HARD_BOUNCE


async def test_out_of_order_events_never_move_a_status_back(
    client: httpx.AsyncClient, rt: Runtime, signer: SelfSigned, fetcher: Fetcher
) -> None:
    delivered_first = await sent_email(rt, "a")
    bounced_first = await sent_email(rt, "b")
    for m, order in (
        (delivered_first, ("Delivery", "Bounce")),
        (bounced_first, ("Bounce", "Delivery")),
    ):
        for i, kind in enumerate(order):
            doc = sns_envelope(signer, json.dumps(ses_event(kind, m.id)), sns_id=f"{m.id}-{i}")
            assert (await post_sns(client, doc)).status_code == 200
    assert await status(rt, delivered_first) == (MessageStatus.DELIVERED, None)
    assert await status(rt, bounced_first) == (MessageStatus.FAILED, "hard_bounce")


async def test_a_tampered_message_is_403_and_changes_nothing(
    client: httpx.AsyncClient, rt: Runtime, signer: SelfSigned, fetcher: Fetcher
) -> None:
    m = await sent_email(rt)
    doc = sns_envelope(signer, json.dumps(ses_event("Delivery", m.id)))
    doc["Message"] = json.dumps(ses_event("Bounce", m.id))
    body = problem(await post_sns(client, doc), 403)
    assert body["errors"] == [{"field": "Signature", "message": "does not verify"}]
    assert await status(rt, m) == (MessageStatus.SENT, None)
    assert await suppressed(rt) is None


async def test_a_certificate_from_elsewhere_is_refused_before_fetching(
    client: httpx.AsyncClient, rt: Runtime, signer: SelfSigned, fetcher: Fetcher
) -> None:
    m = await sent_email(rt)
    for url in (
        "https://evil.example/SimpleNotificationService-0123.pem",
        "http://sns.eu-west-1.amazonaws.com/SimpleNotificationService-0123.pem",
        "https://sns.eu-west-1.amazonaws.com.evil.example/x.pem",
        "https://sns.eu-west-1.amazonaws.com/not-a-cert",
    ):
        doc = sns_envelope(signer, json.dumps(ses_event("Bounce", m.id)), cert_url=url)
        problem(await post_sns(client, doc), 403)
    assert fetcher.calls == []
    assert await status(rt, m) == (MessageStatus.SENT, None)


async def test_another_topic_is_403(
    client: httpx.AsyncClient, rt: Runtime, signer: SelfSigned, fetcher: Fetcher
) -> None:
    m = await sent_email(rt)
    other = "arn:aws:sns:eu-west-1:999999999999:someone-elses"
    doc = sns_envelope(signer, json.dumps(ses_event("Bounce", m.id)), topic=other)
    body = problem(await post_sns(client, doc), 403)
    assert body["errors"][0]["field"] == "TopicArn"  # type: ignore[index]
    assert await suppressed(rt) is None


async def test_subscription_confirmation_gets_the_subscribe_url(
    client: httpx.AsyncClient, signer: SelfSigned, fetcher: Fetcher
) -> None:
    doc = sns_envelope(
        signer,
        "You have chosen to subscribe to the topic ...",
        kind="SubscriptionConfirmation",
        Token="tok-123",
        SubscribeURL=SUBSCRIBE_URL,
    )
    r = await post_sns(client, doc)
    assert r.json() == {"result": "confirmed"}
    assert fetcher.calls == [CERT_URL, SUBSCRIBE_URL]


async def test_a_subscribe_url_off_sns_is_never_fetched(
    client: httpx.AsyncClient, signer: SelfSigned, fetcher: Fetcher
) -> None:
    doc = sns_envelope(
        signer,
        "subscribe",
        kind="SubscriptionConfirmation",
        Token="tok-123",
        SubscribeURL="https://169.254.169.254/latest/meta-data/",
    )
    problem(await post_sns(client, doc), 403)
    assert fetcher.calls == [CERT_URL]


async def test_an_unreachable_certificate_is_503_so_sns_retries(
    client: httpx.AsyncClient, rt: Runtime, signer: SelfSigned, fetcher: Fetcher
) -> None:
    m = await sent_email(rt)
    fetcher.fail = True
    doc = sns_envelope(signer, json.dumps(ses_event("Delivery", m.id)))
    problem(await post_sns(client, doc), 503)
    fetcher.fail = False
    assert (await post_sns(client, doc)).json() == {"result": "applied"}
    assert await status(rt, m) == (MessageStatus.DELIVERED, None)


async def test_unknown_types_and_fields_are_200(
    client: httpx.AsyncClient, rt: Runtime, signer: SelfSigned, fetcher: Fetcher
) -> None:
    m = await sent_email(rt)
    weird = ses_event("Delivery", m.id, newField={"nested": [1, 2]})
    weird["delivery"]["recipients"] = "not a list"
    weird["mail"]["headers"].append({"name": 7})
    for i, doc in enumerate(
        [
            {"notificationType": "Open", "open": {}},
            {"eventType": "DeliveryDelay", "mail": []},
            ["not", "an", "object"],
            weird,
        ]
    ):
        envelope = sns_envelope(signer, json.dumps(doc), sns_id=f"w{i}", Extra="field")
        r = await post_sns(client, envelope)
        assert r.status_code == 200, r.text
    not_json = sns_envelope(signer, "plain text, not JSON", sns_id="w9")
    assert (await post_sns(client, not_json)).json() == {"result": "ignored"}
    assert await status(rt, m) == (MessageStatus.DELIVERED, None)


async def test_found_by_our_message_id_header_when_no_tepat_header(
    client: httpx.AsyncClient, rt: Runtime, signer: SelfSigned, fetcher: Fetcher
) -> None:
    m = await sent_email(rt)
    event = ses_event("Delivery", None)
    event["mail"]["commonHeaders"]["messageId"] = f"<{m.id}@shop.example>"
    assert (await post_sns(client, sns_envelope(signer, json.dumps(event)))).json() == {
        "result": "applied"
    }
    assert await status(rt, m) == (MessageStatus.DELIVERED, None)


async def test_mail_that_is_not_ours_suppresses_nothing(
    client: httpx.AsyncClient, rt: Runtime, signer: SelfSigned, fetcher: Fetcher
) -> None:
    r = await post_sns(client, sns_envelope(signer, json.dumps(ses_event("Bounce", None))))
    assert r.json() == {"result": "not_ours"}
    assert await suppressed(rt) is None


async def test_relay_with_the_shared_secret(client: httpx.AsyncClient, rt: Runtime) -> None:
    m = await sent_email(rt)
    event = ses_event("Bounce", m.id, eventId="relay-evt-1")
    r = await post_relay(client, event)
    assert r.json() == {"result": "applied"}
    assert await status(rt, m) == (MessageStatus.FAILED, "hard_bounce")
    assert await suppressed(rt) == SuppressionReason.HARD_BOUNCE
    assert (await post_relay(client, event)).json() == {"result": "duplicate"}


async def test_relay_with_a_bad_signature_is_403_and_changes_nothing(
    client: httpx.AsyncClient, rt: Runtime
) -> None:
    m = await sent_email(rt)
    event = ses_event("Bounce", m.id)
    problem(await post_relay(client, event, secret="x" * 40), 403)
    body = json.dumps(event).encode()
    unsigned = await client.post(PATH, content=body, headers={"X-Tepat-Signature": "nonsense"})
    problem(unsigned, 403)
    assert await status(rt, m) == (MessageStatus.SENT, None)
    assert await suppressed(rt) is None


async def test_not_json_is_400(client: httpx.AsyncClient, fetcher: Fetcher) -> None:
    body = problem(await client.post(PATH, content=b"{not json"), 400)
    assert body["errors"] == [{"field": "body", "message": "not a JSON document"}]


async def test_a_repeat_after_the_dedup_window_is_still_forward_only(
    client: httpx.AsyncClient, rt: Runtime, signer: SelfSigned, fetcher: Fetcher, clock: FakeClock
) -> None:
    m = await sent_email(rt)
    first = sns_envelope(signer, json.dumps(ses_event("Bounce", m.id)), sns_id="x1")
    await post_sns(client, first)
    clock.advance(timedelta(days=1))
    # The same bounce under a new SNS id (a republished event), then a late delivery.
    await post_sns(client, sns_envelope(signer, json.dumps(ses_event("Bounce", m.id)), sns_id="x2"))
    late = sns_envelope(signer, json.dumps(ses_event("Delivery", m.id)), sns_id="x3")
    assert (await post_sns(client, late)).json() == {"result": "applied"}
    assert await status(rt, m) == (MessageStatus.FAILED, "hard_bounce")


async def test_without_allowed_topics_sns_is_403(
    client: httpx.AsyncClient, rt: Runtime, app: Any, signer: SelfSigned, fetcher: Fetcher
) -> None:
    m = await sent_email(rt)
    app.state.email_events.topics = frozenset()
    doc = sns_envelope(signer, json.dumps(ses_event("Delivery", m.id)))
    body = problem(await post_sns(client, doc), 403)
    assert "TEPAT_EMAIL_EVENTS_TOPIC_ARNS" in str(body["detail"])
    assert fetcher.calls == []
    assert await status(rt, m) == (MessageStatus.SENT, None)


async def test_without_a_relay_secret_signed_posts_are_403(
    client: httpx.AsyncClient, rt: Runtime, app: Any
) -> None:
    m = await sent_email(rt)
    app.state.email_events.secret = None
    problem(await post_relay(client, ses_event("Delivery", m.id)), 403)
    assert await status(rt, m) == (MessageStatus.SENT, None)
