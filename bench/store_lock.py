"""``python -m bench.store_lock DB SECONDS``: a store outage for SQLite.

Holds ``BEGIN EXCLUSIVE`` on the database for ``SECONDS``, so every write of every
other process waits (its busy timeout) and then fails, as if the store were down.
In WAL mode readers still read. Prints ``locked`` once the lock is held and
``released`` after the commit; SIGTERM releases early.
"""

from __future__ import annotations

import signal
import sqlite3
import sys
import threading


def main(argv: list[str]) -> int:
    db, seconds = argv[0], float(argv[1])
    released = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: released.set())
    conn = sqlite3.connect(db, timeout=60, isolation_level=None)
    conn.execute("BEGIN EXCLUSIVE")
    print("locked", flush=True)
    released.wait(seconds)
    conn.execute("COMMIT")
    conn.close()
    print("released", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
