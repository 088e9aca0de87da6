"""Run the Twilio sandbox over real HTTP: in the foreground (CLI) or in a thread (tests)."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import uvicorn

from tepat.sandbox.server import _ThreadServer
from tepat.sandbox.twilio import TwilioSandbox


def serve_twilio_sandbox(
    host: str = "127.0.0.1",
    port: int = 8002,
    rate_limit: float | None = None,
    callback_delay_seconds: float = 1.0,
) -> None:
    """Serve a fake Twilio Messages API until interrupted (``tepat sandbox twilio``).

    Point Tepat at it with ``TEPAT_TWILIO_URL=http://HOST:PORT`` and the sandbox's
    account SID and auth token (printed at start).
    """
    sandbox = TwilioSandbox(
        rate_limit=rate_limit or None, callback_delay_seconds=callback_delay_seconds
    )
    print(
        f"tepat: Twilio sandbox at http://{host}:{port}"
        f" (TEPAT_TWILIO_ACCOUNT_SID={sandbox.account_sid}"
        f" TEPAT_TWILIO_AUTH_TOKEN={sandbox.auth_token})",
        flush=True,
    )
    uvicorn.run(sandbox.app, host=host, port=port, log_config=None)


@dataclass(frozen=True, slots=True)
class RunningTwilioSandbox:
    sandbox: TwilioSandbox
    base_url: str  # what TEPAT_TWILIO_URL takes


@contextmanager
def running_twilio_sandbox(
    sandbox: TwilioSandbox | None = None, host: str = "127.0.0.1", startup_timeout: float = 10.0
) -> Iterator[RunningTwilioSandbox]:
    """Serve ``sandbox`` over HTTP on a free port, in a daemon thread (as
    :func:`tepat.sandbox.server.running_sandbox` does for Expo)."""
    sandbox = sandbox or TwilioSandbox()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(sandbox.app, log_level="warning", lifespan="off", access_log=False)
    server = _ThreadServer(config)
    thread = threading.Thread(
        target=server.run, kwargs={"sockets": [sock]}, name=f"twilio-sandbox:{port}", daemon=True
    )
    thread.start()
    try:
        if not server.ready.wait(startup_timeout) or not server.started:
            raise RuntimeError(f"the Twilio sandbox did not start on {host}:{port}")
        yield RunningTwilioSandbox(sandbox, f"http://{host}:{port}")
    finally:
        sandbox.release_stalled()
        server.should_exit = True
        thread.join(timeout=startup_timeout)
        sock.close()
