"""An app's e-mail and SMS end to end (issue 23), through its own accounts: an event of
app shop, routed in shop's own ``event_types`` to e-mail and SMS, goes out over real
SMTP (aiosmtpd) from shop's relay settings and over HTTP to a Twilio sandbox holding
shop's account. The mail's one-click unsubscribe link leads to /apps/shop/u/… and opts
out shop's user alone; the same link at the default app's path is forged. The sandbox's
status callbacks go to shop's public path, signed with shop's auth token, and move the
SMS to ``delivered`` in shop's store. Real time, on both brokers.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tepat.domain.apps import DEFAULT_APP
from tepat.domain.models import MessageStatus
from tepat.ports.repositories.messages import MessageQuery
from tepat.sandbox.server import RunningTwilioSandbox, running_sandbox
from tepat.sandbox.twilio import TwilioSandbox
from tests.support.app_deployment import Deployment, app_id_for, deployment
from tests.support.provider_sandboxes import BROKERS
from tests.support.smtp_server import SmtpServer
from tests.support.waiting import eventually

pytestmark = pytest.mark.parametrize("broker", BROKERS)
SHOP_SID, SHOP_AUTH = "AC" + "7" * 32, "shop-twilio-auth-token-abcdef0123"
SENDER, PHONE, EMAIL = "+14155550100", "+14155552671", "ana@example.com"
EVENT_TYPES = {
    "invoice.overdue": {
        "category": "custom",
        "channels": [{"channel": "email"}, {"channel": "sms"}],
    }
}
ONE_CLICK = {
    "content": "List-Unsubscribe=One-Click",
    "headers": {"content-type": "application/x-www-form-urlencoded"},
}


@pytest.fixture
def smtp() -> Iterator[SmtpServer]:
    with SmtpServer() as server:
        yield server


@pytest.fixture
def twilio() -> Iterator[RunningTwilioSandbox]:
    sandbox = TwilioSandbox(account_sid=SHOP_SID, auth_token=SHOP_AUTH)
    with running_sandbox(sandbox) as running:
        yield running


async def _ok(response: httpx.Response) -> dict[str, Any]:
    assert response.is_success, response.text
    return dict(response.json()) if response.content else {}


async def _shop_user_and_templates(api: httpx.AsyncClient) -> None:
    await _ok(await api.put("/v1/users/ana", json={"timezone": "UTC"}))
    for channel, address in (("email", EMAIL), ("sms", PHONE)):
        body = {"address": address, "verified": True}
        await _ok(await api.put(f"/v1/users/ana/contacts/{channel}", json=body))
    email = {"title": "Invoice {{ invoice }}", "body": "Please pay {{ invoice }}."}
    await _ok(await api.put("/v1/templates/invoice.overdue/email/en", json=email))
    sms = {"body": "Invoice {{ invoice }} is overdue."}
    await _ok(await api.put("/v1/templates/invoice.overdue/sms/en", json=sms))


async def _sms_status(d: Deployment, app_id: str) -> set[MessageStatus]:
    page = await d.runtime(app_id).store.list_messages(MessageQuery("ana"))
    return {m.status for m in page.items if m.channel == "sms"}


async def test_an_apps_email_and_sms_use_its_accounts_and_its_public_paths(
    tmp_path: Path, broker: str, smtp: SmtpServer, twilio: RunningTwilioSandbox
) -> None:
    async with deployment(tmp_path, broker, smtp_tls="none") as d:
        shop = app_id_for(broker, "shop")
        key = await d.create_app(
            shop,
            event_types=EVENT_TYPES,
            smtp_host="127.0.0.1",
            smtp_port=smtp.port,
            smtp_from="Shop <billing@shop.example>",
            twilio_account_sid=SHOP_SID,
            twilio_auth_token=SHOP_AUTH,
            twilio_from=SENDER,
            twilio_url=twilio.base_url,
        )
        # The same user id in the default app: another person, untouched by shop's.
        await _ok(await d.operator.put("/v1/users/ana", json={"timezone": "UTC"}))
        async with d.client(key) as api:
            await _shop_user_and_templates(api)
            event = {
                "event_id": "ev-1",
                "type": "invoice.overdue",
                "user_ids": ["ana"],
                "data": {"invoice": "8841"},
                "occurred_at": "2027-03-01T00:00:00+00:00",
            }
            r = await api.post("/v1/events", json=event)
            assert r.status_code == 202, r.text

        await eventually(lambda: bool(smtp.received), timeout=30, what="the mail")
        [mail] = [m.mail for m in smtp.received]
        assert mail["From"] == "Shop <billing@shop.example>" and mail["To"] == EMAIL
        [link] = re.findall(r"<(http[^>]+)>", str(mail["List-Unsubscribe"]))
        assert link.startswith(f"{d.url}/apps/{shop}/u/")
        token = link.rpartition("/u/")[2]

        # Twilio's callbacks, at shop's path, signed with shop's token: delivered.
        async def sms_delivered() -> bool:
            return await _sms_status(d, shop) == {MessageStatus.DELIVERED}

        await eventually(sms_delivered, timeout=30, what="the SMS delivered")
        [sent] = twilio.sandbox.received()
        assert sent["to"] == PHONE and sent["from"] == SENDER
        callbacks = twilio.sandbox.callbacks()
        assert callbacks and all(c["http_status"] == 200 for c in callbacks), callbacks
        assert all(
            c["url"].startswith(f"{d.url}/apps/{shop}/v1/providers/twilio/status?m=")
            for c in callbacks
        )

        async with httpx.AsyncClient(base_url=d.url, timeout=30) as public:
            r = await public.post(f"/u/{token}", **ONE_CLICK)  # type: ignore[arg-type]
            assert r.status_code == 403, r.text
            r = await public.post(link.removeprefix(d.url), **ONE_CLICK)  # type: ignore[arg-type]
            assert r.status_code == 200, r.text
        assert await d.runtime(shop).store.get_preferences("ana") == {"custom.email": False}
        assert await d.runtime(DEFAULT_APP).store.get_preferences("ana") == {}
        assert await _sms_status(d, DEFAULT_APP) == set()
