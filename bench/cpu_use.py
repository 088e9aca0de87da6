"""CPU seconds from /proc: per process tree and for the whole machine.

CPU time is what a shared machine's other load does not inflate the way it inflates wall
time, so the benches report costs as CPU per unit of work (``bench/register.py``: per user;
``bench/scenarios.py``: per notification, the capacity model's inputs).
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

TICKS = os.sysconf("SC_CLK_TCK")


def _stat_fields(pid_dir: Path) -> list[str] | None:
    try:
        stat = (pid_dir / "stat").read_text()
    except OSError:
        return None
    # the command name (field 2) may hold spaces: split after its closing parenthesis
    return stat.rsplit(")", 1)[1].split()


def tree_cpu_seconds(pid: int) -> float:
    """User + system CPU of ``pid`` and its descendants (uvicorn's workers, say); 0.0 for a
    process that is gone."""
    parents: dict[int, int] = {}
    cpu: dict[int, float] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or (fields := _stat_fields(entry)) is None:
            continue
        parents[int(entry.name)] = int(fields[1])
        cpu[int(entry.name)] = (int(fields[11]) + int(fields[12])) / TICKS
    tree, todo = {pid}, [pid]
    while todo:
        parent = todo.pop()
        for child, ppid in parents.items():
            if ppid == parent and child not in tree:
                tree.add(child)
                todo.append(child)
    return sum(cpu.get(p, 0.0) for p in tree)


def machine_busy_seconds() -> float:
    """CPU seconds every core of the machine spent on anything but idle and I/O wait since
    boot (the first line of /proc/stat)."""
    first = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    ticks = [int(x) for x in first]
    idle, iowait = ticks[3], ticks[4]
    # guest time is already counted in user: the first eight fields are the whole
    return (sum(ticks[:8]) - idle - iowait) / TICKS


def activemq_pid(stomp_url: str) -> int | None:
    """The JVM of a broker on this machine: the java process started with the URL's STOMP
    port (``scripts/activemq.sh`` passes ``-Dactivemq.stomp.port=PORT``, whether the bench
    started it or not); None when there is none (a remote broker, another launcher)."""
    parts = urlsplit(stomp_url)
    if parts.hostname not in ("127.0.0.1", "localhost", "::1"):
        return None
    marker = f"-Dactivemq.stomp.port={parts.port or 61613}".encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if marker in argv:
            return int(entry.name)
    return None


@dataclass(frozen=True)
class CpuWindow:
    wall_seconds: float
    cpu_seconds: dict[str, float]  # per name; a shared process minus its rate before
    idle_cores: dict[str, float]  # per name: its CPU rate between watch and start
    machine_busy_seconds: float  # every process on the machine, this run's and others'


class CpuMeter:
    """CPU seconds of named process trees and of the machine over one window.

    Each process is watched from ``watch`` on, so its rate before ``start`` is known too:
    a process of the run then idled (its fixed cost per second); a ``shared`` one (a
    broker other clients use too) did the others' work, and that rate is subtracted over
    the window (an estimate: the others' load is not constant).
    """

    def __init__(self, shared: frozenset[str] = frozenset()) -> None:
        self._shared = shared
        self._watched: dict[str, tuple[int, float, float]] = {}  # pid, since, CPU then

    def watch(self, pids: Mapping[str, int]) -> None:
        now = time.monotonic()
        self._watched |= {name: (pid, now, tree_cpu_seconds(pid)) for name, pid in pids.items()}

    def start(self, *, quiet_before: bool = True) -> None:
        """``quiet_before``: nothing of the run's work happened since ``watch``; otherwise
        no rate before the window is taken (nor subtracted)."""
        self._quiet_before = quiet_before
        self._harness = time.process_time()  # this process alone, not its children
        self._started = (time.monotonic(), self._read(), machine_busy_seconds())

    def stop(self) -> CpuWindow:
        t0, before, busy0 = self._started
        wall = time.monotonic() - t0
        after = self._read()
        spent = {name: after[name] - before[name] for name in self._watched}
        idle: dict[str, float] = {}
        for name, (_, since, cpu_then) in self._watched.items():
            if self._quiet_before and t0 - since > 0:
                idle[name] = (before[name] - cpu_then) / (t0 - since)
        for name in self._shared & idle.keys():
            spent[name] = max(0.0, spent[name] - idle[name] * wall)
        spent["harness"] = time.process_time() - self._harness
        return CpuWindow(wall, spent, idle, machine_busy_seconds() - busy0)

    def _read(self) -> dict[str, float]:
        return {name: tree_cpu_seconds(pid) for name, (pid, _, _) in self._watched.items()}
