"""A MongoDB-wire server of the bench's own (``scripts/mongo-wire.sh``, SecantusDB), which
chaos may SIGKILL and restart on the same port with its storage.

Started with ``TEPAT_MONGO_WIRE_SYNC=1``: without it the server acknowledges a write
before its journal record leaves the process, and a SIGKILL loses the last acknowledged
writes (a fault of the stand-in, not of Tepat, that the run would count as Tepat's).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from bench.report import ROOT, log

SCRIPT = ROOT / "scripts" / "mongo-wire.sh"
DATABASE = "tepat"


@dataclass(frozen=True)
class MongoWire:
    folder: Path
    address: str  # mongodb://127.0.0.1:PORT, the same across restarts

    @property
    def url(self) -> str:
        return f"{self.address}/{DATABASE}"

    def kill(self) -> datetime:
        """SIGKILL: no checkpoint, no goodbye to the clients."""
        pid = int((self.folder / "server.pid").read_text())
        os.kill(pid, signal.SIGKILL)
        at = datetime.now(UTC)
        log(f"killed the wire server (pid {pid})")
        return at

    def restart(self) -> float:
        """The same port and storage (``scripts/mongo-wire.sh restart``, which waits for a
        ping); returns the seconds it took."""
        started = time.monotonic()
        _script("restart", self.folder)
        return time.monotonic() - started


def _script(command: str, folder: Path) -> str:
    env = {**os.environ, "TEPAT_MONGO_WIRE_SYNC": "1"}
    done = subprocess.run(
        ["bash", str(SCRIPT), command, str(folder)],
        check=True,
        env=env,
        stdout=subprocess.PIPE,
        stderr=sys.stderr,
        text=True,
    )
    return done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""


@contextmanager
def mongo_wire(folder: Path) -> Iterator[MongoWire]:
    """A fresh server in ``folder`` (``TEPAT_MONGO_WIRE_VENV`` names an installed one, else
    the checkout's ``.mongo-wire-venv``), stopped at the end."""
    log(f"starting a wire server in {folder}")
    address = _script("start", folder)
    try:
        yield MongoWire(folder, address)
    finally:
        _script("stop", folder)
