"""Run the Expo sandbox over real HTTP: in the foreground (CLI) or in a thread (tests, demo)."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import uvicorn

from tepat.sandbox.expo import ExpoSandbox


def serve_sandbox(
    host: str = "127.0.0.1",
    port: int = 8090,
    receipt_delay_seconds: float = 0.0,
    access_token: str | None = None,
    rate_limit: float | None = 600.0,
) -> None:
    """Serve a fake Expo push API until interrupted (``tepat sandbox expo --port N``).

    Point Tepat at it with ``TEPAT_EXPO_URL=http://HOST:PORT``. The rate limit defaults to
    Expo's 600 notifications/s; pass ``None`` (or 0) to turn it off.
    """
    sandbox = ExpoSandbox(
        receipt_delay_seconds=receipt_delay_seconds,
        access_token=access_token,
        rate_limit=rate_limit or None,
    )
    # log_config=None: uvicorn logs through the caller's handler (tepat.logging: JSON lines).
    uvicorn.run(sandbox.app, host=host, port=port, log_config=None)


class _ThreadServer(uvicorn.Server):
    """A uvicorn server that says when it is listening, so callers wait on an event, not a sleep."""

    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self.ready = threading.Event()

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        self.ready.set()


@dataclass(frozen=True, slots=True)
class RunningSandbox:
    sandbox: ExpoSandbox
    base_url: str  # e.g. http://127.0.0.1:54321, what TEPAT_EXPO_URL takes


@contextmanager
def running_sandbox(
    sandbox: ExpoSandbox | None = None, host: str = "127.0.0.1", startup_timeout: float = 10.0
) -> Iterator[RunningSandbox]:
    """Serve ``sandbox`` (a fresh one by default) over HTTP on a free port, in a daemon thread.

    The socket is bound here, before the thread starts, so the port is known and cannot be
    taken by someone else in between.
    """
    sandbox = sandbox or ExpoSandbox()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(sandbox.app, log_level="warning", lifespan="off", access_log=False)
    server = _ThreadServer(config)
    thread = threading.Thread(
        target=server.run, kwargs={"sockets": [sock]}, name=f"expo-sandbox:{port}", daemon=True
    )
    thread.start()
    try:
        if not server.ready.wait(startup_timeout) or not server.started:
            raise RuntimeError(f"the Expo sandbox did not start on {host}:{port}")
        yield RunningSandbox(sandbox, f"http://{host}:{port}")
    finally:
        # A stalled answer would hold uvicorn's graceful shutdown until its limit.
        sandbox.release_stalled()
        server.should_exit = True
        thread.join(timeout=startup_timeout)
        sock.close()
