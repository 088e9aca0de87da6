"""Twilio calls an app at its own path (issue 23): ``/apps/<id>/v1/providers/twilio/...``,
signed with that app's auth token over that URL (its public URL is the deployment's
followed by /apps/<id>). A STOP posted there by the app's Twilio account suppresses the
number in that app alone; signed by another account, or posted at the default app's
path, it is refused and changes nothing. Over HTTP, the Twilio sandbox signing as
Twilio does; on both brokers.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tepat.domain.apps import DEFAULT_APP
from tepat.sandbox.twilio import DEFAULT_ACCOUNT_SID, DEFAULT_AUTH_TOKEN, TwilioSandbox
from tests.support.app_deployment import Deployment, app_id_for, deployment
from tests.support.provider_sandboxes import BROKERS

pytestmark = pytest.mark.parametrize("broker", BROKERS)
SHOP_SID, SHOP_AUTH = "AC" + "5" * 32, "shop-twilio-auth-token-0123456789"
PHONE = "+14155550123"
INBOUND = "/v1/providers/twilio/inbound"


async def _suppressed(d: Deployment, app_id: str) -> bool:
    store = d.runtime(app_id).store
    return PHONE in await store.suppressions_for("sms", [PHONE])


async def test_an_apps_twilio_callbacks_verify_with_its_own_auth_token(
    tmp_path: Path, broker: str
) -> None:
    default_twilio: dict[str, Any] = {
        "twilio_account_sid": DEFAULT_ACCOUNT_SID,
        "twilio_auth_token": DEFAULT_AUTH_TOKEN,
        "twilio_from": "+15005550006",
    }
    async with deployment(tmp_path, broker, **default_twilio) as d:
        shop = app_id_for(broker, "shop")
        await d.create_app(
            shop,
            twilio_account_sid=SHOP_SID,
            twilio_auth_token=SHOP_AUTH,
            twilio_from="+15005550007",
        )
        shop_account = TwilioSandbox(account_sid=SHOP_SID, auth_token=SHOP_AUTH)
        default_account = TwilioSandbox()  # the deployment's (default app's) account
        at_shop = f"{d.url}/apps/{shop}{INBOUND}"

        # Refused: the default app's account at shop's path; shop's at the default's.
        assert await default_account.inbound(at_shop, PHONE, "STOP") == 403
        assert await shop_account.inbound(f"{d.url}{INBOUND}", PHONE, "STOP") == 403
        assert not await _suppressed(d, shop)
        assert not await _suppressed(d, DEFAULT_APP)

        assert await shop_account.inbound(at_shop, PHONE, "STOP") == 200
        assert await _suppressed(d, shop)
        assert not await _suppressed(d, DEFAULT_APP)
        # The default app's own, at its own path, still works: its number, its store.
        assert await default_account.inbound(f"{d.url}{INBOUND}", PHONE, "STOP") == 200
        assert await _suppressed(d, DEFAULT_APP)
        assert await shop_account.inbound(at_shop, PHONE, "START") == 200
        assert not await _suppressed(d, shop)
        assert await _suppressed(d, DEFAULT_APP)
