"""A sandbox in its own process (``tepat sandbox expo|fcm|apns``), driven over HTTP."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from bench.procs import Child, child_env, free_port, tepat_argv


@dataclass
class Sandbox:
    child: Child
    url: str

    def stats(self) -> dict[str, int]:
        r = httpx.get(f"{self.url}/_sandbox/stats", timeout=30)
        r.raise_for_status()
        stats: dict[str, int] = r.json()
        return stats

    def describe(self) -> dict[str, Any]:
        """``GET /_sandbox/script``: its scripts, limits and per-token 429s."""
        r = httpx.get(f"{self.url}/_sandbox/script", timeout=30)
        r.raise_for_status()
        described: dict[str, Any] = r.json()
        return described

    def script(self, spec: dict[str, Any]) -> None:
        """``POST /_sandbox/script``: faults, rate limit, ``clear`` (apply_script)."""
        r = httpx.post(f"{self.url}/_sandbox/script", json=spec, timeout=30)
        r.raise_for_status()

    def received(self) -> list[dict[str, Any]]:
        r = httpx.get(f"{self.url}/_sandbox/received", timeout=300)
        r.raise_for_status()
        received: list[dict[str, Any]] = r.json()["received"]
        return received


@contextmanager
def running_sandbox(
    workdir: Path,
    rate_limit: float | None,
    kind: str = "expo",
    token_rate_limit: float | None = None,
) -> Iterator[Sandbox]:
    """``kind``: expo, fcm (its service account written to ``workdir``/fcm.json) or apns
    (its auth key to ``workdir``/apns.p8). ``token_rate_limit``: Expo's, a limit per
    access token (per project)."""
    port = free_port()
    own = {
        "expo": ["--receipt-delay", "3600"],
        "fcm": ["--credentials", str(workdir / "fcm.json")],
        "apns": ["--key-file", str(workdir / "apns.p8")],
    }[kind]
    argv = tepat_argv("sandbox", kind, "--port", str(port), *own)
    if rate_limit:
        argv += ["--rate-limit", str(rate_limit)]
    if token_rate_limit:
        argv += ["--token-rate-limit", str(token_rate_limit)]
    child = Child(f"{kind}-sandbox", argv, child_env({}), workdir / f"sandbox-{port}.log")
    sandbox = Sandbox(child, f"http://127.0.0.1:{port}")
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                sandbox.stats()
                break
            except httpx.HTTPError:
                if not child.alive() or time.monotonic() > deadline:
                    raise RuntimeError(f"the sandbox did not start:\n{child.tail()}") from None
                time.sleep(0.1)
        yield sandbox
    finally:
        child.stop(10)
