"""Registry of store factories for the contract suite: name -> async context manager factory."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from pathlib import Path

from tepat.ports.store import Store

StoreFactory = Callable[[Path], AbstractAsyncContextManager[Store]]
STORE_FACTORIES: dict[str, StoreFactory] = {}

# Each adapter registers itself here (see sqlite_factory.py, mongo_factory.py).

import tests.support.sqlite_factory  # noqa: F401,E402
from tests.support import mongo_factory  # noqa: F401,E402
