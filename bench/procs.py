"""Child processes: start them with a configuration, stop them, and read their peak RSS.

Peak RSS comes from ``os.wait4`` (the kernel's ``ru_maxrss`` for that one child),
not from polling, so a short spike is not missed.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from bench.report import ROOT


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def child_env(overrides: dict[str, str]) -> dict[str, str]:
    """The bench's environment minus any ``TEPAT_*`` it inherited, plus ``overrides``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TEPAT_")}
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p
    )
    env.update(overrides)
    return env


@dataclass
class Exited:
    returncode: int
    peak_rss_mb: float
    wall_seconds: float


class Child:
    """One child process; its stdout and stderr go to ``log_path``."""

    def __init__(self, name: str, argv: list[str], env: dict[str, str], log_path: Path) -> None:
        self.name = name
        self.log_path = log_path
        self._log: IO[bytes] = log_path.open("wb")
        self.started = time.monotonic()
        self.proc = subprocess.Popen(
            argv, env=env, cwd=ROOT, stdout=self._log, stderr=subprocess.STDOUT
        )
        self.exited: Exited | None = None

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        if self.exited is not None:
            return False
        pid, status, usage = os.wait4(self.pid, os.WNOHANG)
        if pid == 0:
            return True
        self._record(status, usage.ru_maxrss)
        return False

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def wait_for_line(self, needle: str, timeout: float) -> float:
        """Wait until ``needle`` appears in the log; returns the monotonic time it was seen."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if needle in self.log_text():
                return time.monotonic()
            if not self.alive():
                raise RuntimeError(f"{self.name} exited early:\n{self.tail()}")
            time.sleep(0.05)
        raise TimeoutError(f"{self.name}: no {needle!r} within {timeout:.0f}s:\n{self.tail()}")

    def tail(self, lines: int = 30) -> str:
        return "\n".join(self.log_text().splitlines()[-lines:])

    def wait(self, timeout: float | None = None) -> Exited:
        """Reap the child (``os.wait4``) and return its exit code and peak RSS."""
        if self.exited is not None:
            return self.exited
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            pid, status, usage = os.wait4(self.pid, os.WNOHANG if deadline else 0)
            if pid != 0:
                return self._record(status, usage.ru_maxrss)
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError(f"{self.name} still running after {timeout}s")
            time.sleep(0.02)

    def stop(self, timeout: float = 30.0) -> Exited:
        """SIGTERM (a clean drain), SIGKILL if it does not exit within ``timeout``."""
        if self.exited is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                return self.wait(timeout)
            except TimeoutError:
                self.proc.kill()
                return self.wait()
        return self.exited

    def _record(self, status: int, maxrss_kib: int) -> Exited:
        self.proc.returncode = os.waitstatus_to_exitcode(status)
        self.exited = Exited(
            returncode=self.proc.returncode,
            peak_rss_mb=round(maxrss_kib / 1024, 1),
            wall_seconds=time.monotonic() - self.started,
        )
        self._log.close()
        return self.exited


def tepat_argv(*args: str) -> list[str]:
    """``tepat ARGS`` with this interpreter (the same code the console script runs)."""
    return [sys.executable, "-m", "tepat.cli", *args]
