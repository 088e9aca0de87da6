"""The Mongo store on the mongomock facade (``mongo-mock``) and on a server (``mongo-server``).

Every Mongo suite runs on both. ``mongo-mock`` is in memory and fast. ``mongo-server``
speaks the wire protocol to the server named by ``TEPAT_TEST_MONGO_URL`` (the test command
starts one with ``scripts/mongo-wire.sh``; docker-compose gives a mongod), each test in a
database of its own, dropped afterwards, so tests can run in parallel on one server.
Without the URL the ``mongo-server`` tests skip with the reason, except where the test
command or CI runs them (``TEPAT_TEST_REQUIRE_SERVICES=1`` or ``CI=true``): there they
fail, so a lost server never turns into a green run that tested only the facade.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest
from pymongo import AsyncMongoClient

from tepat.adapters.mongo import MongoStore
from tepat.clock import Clock
from tepat.ports.store import Store
from tests.support.mongo_async_mock import AsyncMockClient
from tests.support.store_factories import STORE_FACTORIES, StoreFactory

SERVER_URL_ENV = "TEPAT_TEST_MONGO_URL"
MOCK = "mongo-mock"
SERVER = "mongo-server"
MONGO_STORES = (MOCK, SERVER)


def services_required() -> bool:
    """True where the test command (or CI) provides every service, the Mongo server too."""
    return os.environ.get("TEPAT_TEST_REQUIRE_SERVICES") == "1" or os.environ.get("CI") == "true"


def wire_server_venv() -> Path:
    """The installed wire server's virtualenv (``TEPAT_MONGO_WIRE_VENV``, else the checkout's
    ``.mongo-wire-venv``); without an install, skip the calling test (fail where services
    are required)."""
    root = Path(__file__).resolve().parents[2]
    venv = Path(os.environ.get("TEPAT_MONGO_WIRE_VENV", root / ".mongo-wire-venv"))
    if not (venv / ".tepat-installed").exists():
        reason = f"no wire server installed in {venv}: run `scripts/mongo-wire.sh install`"
        if services_required():
            pytest.fail(reason)
        pytest.skip(reason)
    return venv


def server_url() -> str:
    """The server's URL from the environment; without it, skip the calling test (fail
    where services are required)."""
    url = os.environ.get(SERVER_URL_ENV, "").strip()
    if url:
        return url
    reason = (
        f"{SERVER_URL_ENV} is not set: start a MongoDB-wire server with"
        f" `scripts/mongo-wire.sh install && scripts/mongo-wire.sh start .mongo-wire`"
        f" and set {SERVER_URL_ENV} to the URL it prints"
    )
    if services_required():
        pytest.fail(reason)
    pytest.skip(reason)


def _with_database(url: str, name: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path=f"/{name}"))


@asynccontextmanager
async def server_database(prefix: str = "tepat_test") -> AsyncIterator[str]:
    """The URL of a database no other test uses, on the server; dropped afterwards."""
    name = f"{prefix}_{uuid.uuid4().hex[:12]}"
    url = _with_database(server_url(), name)
    try:
        yield url
    finally:
        await drop_database(url, name)


async def drop_database(url: str, name: str) -> None:
    """Drop ``name`` on the server of ``url``: with a client of its own (the store's is
    closed by now), whatever state the test left the store in."""
    admin: AsyncMongoClient[dict[str, object]] = AsyncMongoClient(url)
    try:
        await admin.drop_database(name)
    finally:
        await admin.close()


@asynccontextmanager
async def unopened_mongo_store(
    store_name: str, clock: Clock | None = None, prefix: str = "tepat_test"
) -> AsyncIterator[MongoStore]:
    """A Mongo store on ``mongo-mock`` or ``mongo-server``, not yet opened (a runtime
    opens and closes the store it is given); on the server its database is dropped after."""
    if store_name == MOCK:
        yield MongoStore(
            f"mongodb://mongomock.invalid/{prefix}", client=AsyncMockClient(), clock=clock
        )
        return
    if store_name != SERVER:
        raise ValueError(f"not a Mongo store: {store_name!r}")
    async with server_database(prefix) as url:
        yield MongoStore(url, clock=clock)


def _factory(store_name: str) -> StoreFactory:
    @asynccontextmanager
    async def opened(tmp: Path) -> AsyncIterator[Store]:
        del tmp  # in memory, or on the server
        async with unopened_mongo_store(store_name) as store:
            await store.open()
            try:
                yield store
            finally:
                await store.close()

    return opened


for _name in MONGO_STORES:
    STORE_FACTORIES[_name] = _factory(_name)
