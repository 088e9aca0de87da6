"""A push sandbox in its own process (``tepat sandbox expo|fcm|apns``), driven over HTTP."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from bench import push_kinds
from bench.procs import Child, child_env, free_port


@dataclass
class Sandbox:
    child: Child
    url: str
    kind: str = "expo"  # the push provider it stands in for (bench/push_kinds.py)

    def stats(self) -> dict[str, int]:
        """Its counters; ``send_requests`` whatever the provider calls them."""
        r = httpx.get(f"{self.url}/_sandbox/stats", timeout=30)
        r.raise_for_status()
        stats: dict[str, int] = r.json()
        stats["send_requests"] = push_kinds.send_requests(self.kind, stats)
        return stats

    def script(self, spec: dict[str, Any]) -> None:
        """``POST /_sandbox/script``: faults, rate limit, ``clear`` (apply_script)."""
        r = httpx.post(f"{self.url}/_sandbox/script", json=spec, timeout=30)
        r.raise_for_status()

    def received(self) -> list[dict[str, Any]]:
        r = httpx.get(f"{self.url}/_sandbox/received", timeout=300)
        r.raise_for_status()
        received: list[dict[str, Any]] = r.json()["received"]
        return [push_kinds.as_expo_entry(self.kind, e) for e in received]


@contextmanager
def running_sandbox(
    workdir: Path, rate_limit: float | None, kind: str = "expo"
) -> Iterator[Sandbox]:
    port = free_port()
    argv = push_kinds.sandbox_argv(kind, port, workdir, rate_limit)
    child = Child(f"{kind}-sandbox", argv, child_env({}), workdir / f"sandbox-{port}.log")
    sandbox = Sandbox(child, f"http://127.0.0.1:{port}", kind)
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
