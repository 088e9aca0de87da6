"""Registers the Mongo store with the contract suite.

With ``TEPAT_TEST_MONGO_URL`` set (docker-compose gives a server) the suite runs
on that server, each test in a fresh database that is dropped afterwards; the
key is ``mongo-server``. Without it, it runs on the mongomock facade and the key
is ``mongo-mock``, so the test ids say which backend a run actually exercised.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from pymongo import AsyncMongoClient

from tepat.adapters.mongo import MongoStore
from tepat.ports.store import Store
from tests.support.mongo_async_mock import AsyncMockClient
from tests.support.store_factories import STORE_FACTORIES

SERVER_URL_ENV = "TEPAT_TEST_MONGO_URL"


def _with_database(url: str, name: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path=f"/{name}"))


@asynccontextmanager
async def mongo_server_store(tmp: Path) -> AsyncIterator[Store]:
    del tmp  # the database lives on the server
    name = f"tepat_test_{uuid.uuid4().hex[:12]}"
    url = _with_database(os.environ[SERVER_URL_ENV], name)
    store = MongoStore(url)
    await store.open()
    try:
        yield store
    finally:
        await store.close()
        # A separate client: the store's own is closed, and the drop must happen
        # even when the test left the store in a bad state.
        admin: AsyncMongoClient[dict[str, object]] = AsyncMongoClient(url)
        try:
            await admin.drop_database(name)
        finally:
            await admin.close()


@asynccontextmanager
async def mongo_mock_store(tmp: Path) -> AsyncIterator[Store]:
    del tmp  # in memory
    client = AsyncMockClient()
    store = MongoStore("mongodb://mongomock.invalid/tepat_test", client=client)
    await store.open()
    try:
        yield store
    finally:
        await store.close()


if os.environ.get(SERVER_URL_ENV):
    STORE_FACTORIES["mongo-server"] = mongo_server_store
else:
    STORE_FACTORIES["mongo-mock"] = mongo_mock_store
