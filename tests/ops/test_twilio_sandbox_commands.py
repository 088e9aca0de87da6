"""`tepat sandbox twilio --port N` serves the Twilio sandbox; `tepat serve --sandbox` runs one
beside the Expo sandbox, sends SMS to it and takes its signed callbacks (TEPAT_PUBLIC_URL
pointed at itself), with the configured account's credentials."""

from __future__ import annotations

import socket
from pathlib import Path

import httpx

from tepat.sandbox.twilio import DEFAULT_ACCOUNT_SID, DEFAULT_AUTH_TOKEN
from tests.ops.support import child_env, free_port, tepat, wait_http
from tests.support.waiting import eventually

KEY = "ops-twilio-admin-key-0123456789abcdef"
MESSAGES = f"/2010-04-01/Accounts/{DEFAULT_ACCOUNT_SID}/Messages.json"
PHONE = "+14155552671"
ACCOUNT = "AC" + "0" * 31 + "1"


def free_pair() -> int:
    """A free port whose next port is free too (serve puts the Twilio sandbox there)."""
    for _ in range(50):
        port = free_port()
        try:
            with socket.create_server(("127.0.0.1", port + 1)):
                return port
        except OSError:
            continue
    raise AssertionError("no two free ports in a row")


async def test_tepat_sandbox_twilio(tmp_path: Path) -> None:
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    argv = ["sandbox", "twilio", "--port", str(port), "--callback-delay", "0"]
    with tepat("sandbox", argv, child_env({}), tmp_path) as proc:
        await wait_http(proc, f"{base}/_sandbox/received")
        async with httpx.AsyncClient(base_url=base) as http:
            r = await http.post(
                MESSAGES,
                auth=(DEFAULT_ACCOUNT_SID, DEFAULT_AUTH_TOKEN),
                data={"To": PHONE, "From": "+14155550100", "Body": "hello"},
            )
            assert r.status_code == 201, r.text
            assert r.json()["sid"].startswith("SM")
            received = (await http.get("/_sandbox/received")).json()["received"]
            assert [(m["to"], m["body"]) for m in received] == [(PHONE, "hello")]
        # uvicorn.run ends by re-raising the SIGTERM it handled (as `tepat sandbox expo`).
        assert proc.stop() in (0, -15), proc.stderr()[-3000:]


async def test_serve_sandbox_runs_twilio_and_verifies_its_callbacks(tmp_path: Path) -> None:
    port, sandbox_port = free_port(), free_pair()
    env = child_env(
        {
            "TEPAT_DATABASE_URL": f"sqlite:///{tmp_path}/tepat.db",
            "TEPAT_ADMIN_API_KEY": KEY,
            "TEPAT_METRICS_PORT": "0",
            # Configured credentials: the sandbox takes them (else it has its own).
            "TEPAT_TWILIO_ACCOUNT_SID": ACCOUNT,
            "TEPAT_TWILIO_AUTH_TOKEN": "serve-token",
            "TEPAT_TWILIO_FROM": "+14155550100",
        }
    )
    base = f"http://127.0.0.1:{port}"
    twilio = f"http://127.0.0.1:{sandbox_port + 1}"
    argv = ["serve", "--sandbox", "--port", str(port), "--sandbox-port", str(sandbox_port)]
    with tepat("serve", argv, env, tmp_path) as proc:
        await wait_http(proc, f"{base}/readyz")
        await wait_http(proc, f"{twilio}/_sandbox/received")
        async with httpx.AsyncClient(base_url=twilio, timeout=10) as http:
            # A STOP reply, signed by the sandbox for the URL it posts to: accepted.
            r = await http.post(
                "/_sandbox/inbound",
                json={"url": f"{base}/v1/providers/twilio/inbound", "from": PHONE, "body": "STOP"},
            )
            assert r.json() == {"http_status": 200}
            # Status callbacks for a message this Tepat does not know: verified, then 200.
            r = await http.post(
                MESSAGES.replace(DEFAULT_ACCOUNT_SID, ACCOUNT),
                auth=(ACCOUNT, "serve-token"),
                data={
                    "To": "+14155552672",
                    "From": "+14155550100",
                    "Body": "hi",
                    "StatusCallback": f"{base}/v1/providers/twilio/status?m=unknown",
                },
            )
            assert r.status_code == 201, r.text

            async def three_answered() -> bool:
                got = (await http.get("/_sandbox/callbacks")).json()["callbacks"]
                return [c["http_status"] for c in got] == [200, 200, 200]

            await eventually(three_answered, timeout=30, what="three callbacks answered 200")
        async with httpx.AsyncClient(base_url=base, headers={"X-API-Key": KEY}) as api:
            r = await api.post(
                "/v1/providers/twilio/inbound",
                data={"From": PHONE, "Body": "START"},
                headers={"X-Twilio-Signature": "forged"},
            )
            assert r.status_code == 403
        assert proc.stop() == 0, proc.stderr()[-3000:]
