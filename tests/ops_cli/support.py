"""Run the real `tepat` command and the Expo sandbox as processes, with a clean environment."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def env(**settings: str) -> dict[str, str]:
    """This environment without inherited ``TEPAT_*`` settings, plus ``settings``."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("TEPAT_")}
    clean["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), clean.get("PYTHONPATH", "")) if p)
    clean.update(settings)
    return clean


def tepat(*args: str, environ: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tepat.cli", *args],
        env=environ,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
    )


def wait_for_port(port: int, proc: subprocess.Popen[bytes], within: float = 20.0) -> None:
    deadline = time.monotonic() + within
    while True:
        if proc.poll() is not None:
            raise AssertionError(f"process exited with {proc.returncode} before listening")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            if time.monotonic() > deadline:
                raise AssertionError(f"nothing listens on {port} after {within}s") from None
            time.sleep(0.02)


@contextmanager
def sandbox(tmp_path: Path, access_token: str | None = None) -> Iterator[str]:
    """A `tepat sandbox expo` process; yields its base URL."""
    port = free_port()
    args = ["sandbox", "expo", "--port", str(port)]
    if access_token is not None:
        args += ["--access-token", access_token]
    with (tmp_path / "sandbox.log").open("wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "tepat.cli", *args],
            env=env(),
            cwd=tmp_path,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            wait_for_port(port, proc)
            yield f"http://127.0.0.1:{port}"
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
