"""An API over a real runtime: SQLite store, embedded broker, fake clock, fake push."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import jwt
import pytest
from fastapi import FastAPI
from pydantic import SecretStr

from api.app import create_app
from tepat.clock import FakeClock
from tepat.config import Settings
from tepat.runtime import Runtime, open_runtime
from tests.support.fake_push import FakePush
from tests.support.mongo_factory import MONGO_STORES, unopened_mongo_store

ADMIN_KEY = "test-admin-key-0123456789abcdef"
JWT_SECRET = "test-jwt-secret-0123456789abcdef0123456789"
START = datetime(2027, 3, 1, 0, 0, tzinfo=UTC)
# The stores a module whose behaviour lives in adapter code runs on (see runtime_on).
STORES = ["sqlite", *MONGO_STORES]


def make_settings(tmp_path: Path) -> Settings:
    return Settings(
        database_url=f"sqlite:///{tmp_path}/t.db",
        broker_url="embedded://",
        jwt_secret=SecretStr(JWT_SECRET),
        admin_api_key=SecretStr(ADMIN_KEY),
    )


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(START)


@pytest.fixture
def push() -> FakePush:
    return FakePush()


@pytest.fixture
async def rt(tmp_path: Path, clock: FakeClock, push: FakePush) -> AsyncIterator[Runtime]:
    async with open_runtime(make_settings(tmp_path), clock=clock, push=push) as runtime:
        yield runtime


@contextlib.asynccontextmanager
async def runtime_on(
    store_name: str,
    tmp_path: Path,
    clock: FakeClock,
    push: FakePush,
    database: str,
    settings: Settings | None = None,
) -> AsyncIterator[Runtime]:
    """A runtime on one of ``STORES``, for modules whose behaviour lives in adapter code and
    so runs on every store: ``sqlite`` (the settings' file), ``mongo-mock`` or
    ``mongo-server`` (a database named after ``database``, on the server one of its own).
    ``settings`` default to :func:`make_settings`; their ``database_url`` is not used on Mongo."""
    settings = settings or make_settings(tmp_path)
    async with contextlib.AsyncExitStack() as stack:
        store = None
        if store_name != "sqlite":
            store = await stack.enter_async_context(
                unopened_mongo_store(store_name, clock=clock, prefix=database)
            )
        yield await stack.enter_async_context(
            open_runtime(settings, clock=clock, push=push, store=store)
        )


@pytest.fixture
def app(rt: Runtime) -> FastAPI:
    return create_app(rt, ADMIN_KEY)


@pytest.fixture
async def client(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://tepat.test") as c:
        yield c


ADMIN = {"X-API-Key": ADMIN_KEY}


def token_for(user_id: str, clock: FakeClock, expires_in: timedelta = timedelta(hours=1)) -> str:
    exp = int((clock.now() + expires_in).timestamp())
    return jwt.encode({"sub": user_id, "exp": exp}, JWT_SECRET, algorithm="HS256")


def bearer(
    user_id: str, clock: FakeClock, expires_in: timedelta = timedelta(hours=1)
) -> dict[str, str]:
    return {"Authorization": f"Bearer {token_for(user_id, clock, expires_in)}"}


def problem(response: httpx.Response, status: int) -> dict[str, object]:
    """Assert ``response`` is a problem+json with ``status``; return its body."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/problem+json"), response.headers
    body = response.json()
    assert body["status"] == status
    assert body["title"]
    return dict(body)


def error_fields(response: httpx.Response) -> set[str]:
    body = problem(response, 422)
    errors = body["errors"]
    assert isinstance(errors, list) and errors, body
    return {e["field"] for e in errors}
