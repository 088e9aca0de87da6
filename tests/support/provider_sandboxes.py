"""Every push provider's sandbox behind one face, for the scenarios each provider must pass
alike (issue 22): start a kind's sandbox (:func:`served`), the settings that point Tepat
at it, a token for it, what it accepted and when, and its faults in its own words.

And the brokers those scenarios run on (:data:`BROKERS`): the embedded one, and ActiveMQ
with queues of the test's own (skipped without ``TEPAT_TEST_STOMP_URL``, which fails the
run under ``scripts/test.sh``: tests/support/require_services.py).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import uuid
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any, ClassVar

import httpx
import pytest

from tepat.adapters.h2_client import H2Client
from tepat.adapters.http_pool import PooledClient
from tepat.adapters.stomp import StompBroker
from tepat.clock import Clock
from tepat.config import Settings
from tepat.domain.categories import DEFAULT_CATEGORIES
from tepat.ports.broker import Broker, Delivery
from tepat.ports.push import PushProvider
from tepat.runtime import make_push_provider
from tepat.sandbox.apns import ApnsSandbox
from tepat.sandbox.expo import ExpoSandbox
from tepat.sandbox.fcm import FcmSandbox
from tepat.sandbox.provider import FakeProvider
from tepat.sandbox.server import running_sandbox
from tepat.sandbox.webpush import WebPushSandbox
from tepat.wiring import build_apns_provider, build_fcm_provider, build_webpush_provider
from tests.support.activemq_factory import REDELIVERY, stomp_url

KINDS = ("expo", "fcm", "apns", "webpush")
# Tepat's provider of each kind, as the settings build it.
BUILDERS: dict[str, Callable[[Settings, Clock], PushProvider | None]] = {
    "expo": make_push_provider,
    "fcm": build_fcm_provider,
    "apns": build_apns_provider,
    "webpush": build_webpush_provider,
}
BROKERS = ("embedded", pytest.param("activemq", marks=pytest.mark.activemq))
#: A module's ``pytestmark``: each test once per provider kind and broker, given to the
#: fixtures that ask for ``kind`` and ``broker``.
EVERY_KIND_AND_BROKER = [
    pytest.mark.parametrize("kind", KINDS),
    pytest.mark.parametrize("broker", BROKERS),
]
# A stalled answer is given up on after this many real seconds (the providers' own 15 s
# would make a test wait that long); the sandbox is local, a real answer takes ms.
ANSWER_TIMEOUT_SECONDS = 1.0


class OwnQueues(StompBroker):
    """ActiveMQ consumed on this test's own queues only: the shared broker's fixed ones
    (``tepat.webhooks``, ``tepat.push.critical`` ...) hold other runs' batches, which a
    consumer would take from them (and hold, due on another clock, filling its prefetch).

    :attr:`subscribed` is set once a consumer's subscription is in place. A batch
    published while a consumer subscribes to several queues at once can be left ready
    beside it, undelivered (seen on ActiveMQ 5.17 here: the sweeper's re-drive is what
    delivers it in a deployment); so a test publishes only after that.
    """

    def __init__(self, url: str, prefix: str, clock: Clock) -> None:
        super().__init__(url, clock=clock, redelivery=REDELIVERY)
        self.prefix = prefix
        self.subscribed = asyncio.Event()

    @asynccontextmanager
    async def consume(
        self, queues: Sequence[str], prefetch: int
    ) -> AsyncIterator[AsyncIterator[Delivery]]:
        ours = [q for q in queues if q.startswith(self.prefix)]
        async with super().consume(ours, prefetch) as deliveries:
            self.subscribed.set()
            yield deliveries


async def subscribed(broker: Broker) -> None:
    """Return once ``broker``'s consumer is subscribed (at once for the embedded one)."""
    if isinstance(broker, OwnQueues):
        await asyncio.wait_for(broker.subscribed.wait(), timeout=30)


def on_broker(broker: str, clock: Clock) -> dict[str, Any]:
    """The ``pipeline`` arguments for ``broker``: ActiveMQ (shared with other tests and
    runs) with queue names of the test's own, or the embedded one."""
    if broker == "embedded":
        return {}
    url, prefix = stomp_url(), f"t{uuid.uuid4().hex[:8]}."
    queues = {p.name: {"queue": f"{prefix}{p.name}"} for p in DEFAULT_CATEGORIES}
    return {"broker_url": url, "categories": queues, "broker": OwnQueues(url, prefix, clock)}


class ProviderSandbox(ABC):
    """One kind's sandbox, served: what a test asks of every provider the same way."""

    kind: ClassVar[str]
    sandbox_type: ClassVar[Callable[..., FakeProvider[Any]]]

    def __init__(self, sandbox: FakeProvider[Any], base_url: str, tmp_path: Path) -> None:
        self.sandbox = sandbox
        self.base_url = base_url
        #: What points Tepat at this sandbox (Settings fields).
        self.settings: dict[str, Any] = self._settings(tmp_path)

    @abstractmethod
    def _settings(self, tmp_path: Path) -> dict[str, Any]: ...

    @abstractmethod
    def token(self, name: str) -> str:
        """A token of this kind for a device called ``name``, valid at registration."""

    @abstractmethod
    def _accepted(self) -> list[tuple[str, datetime]]:
        """(recipient, when) of every notification the sandbox accepted, oldest first."""

    def _recipient(self, token: str) -> str:
        """What the sandbox calls the device of ``token``."""
        return token

    @abstractmethod
    def kill(self, token: str) -> None:
        """From now on, answer ``token``'s notifications as the provider does a dead one."""

    @abstractmethod
    def refuse_next(self, status: int, retry_after: float | None = None) -> None:
        """Refuse the next request with HTTP ``status`` (and ``Retry-After`` if the
        provider sends one)."""

    def least_wait(self, retry_after: float) -> float:
        """The least time Tepat waits after a 429 sent with ``retry_after``."""
        return retry_after

    def stall_next(self) -> None:
        """Accept the next request, then hold its answer back (a timeout, maybe sent)."""
        self.sandbox.fail_after_accept(1, "stall")

    def arrivals(self, token: str) -> list[datetime]:
        recipient = self._recipient(token)
        return [at for to, at in self._accepted() if to == recipient]

    def provider(self, clock: Clock) -> PushProvider:
        """Tepat's provider for this sandbox, as the settings build it, that gives up on an
        answer after :data:`ANSWER_TIMEOUT_SECONDS`."""
        built = BUILDERS[self.kind](Settings(**self.settings), clock)
        if isinstance(built, H2Client):
            built.timeout = ANSWER_TIMEOUT_SECONDS
        else:
            assert isinstance(built, PooledClient)
            built._client.timeout = httpx.Timeout(ANSWER_TIMEOUT_SECONDS)
        return built


class _Expo(ProviderSandbox):
    kind = "expo"
    sandbox: ExpoSandbox
    sandbox_type = ExpoSandbox

    def _settings(self, tmp_path: Path) -> dict[str, Any]:
        return {"expo_url": self.base_url}

    def token(self, name: str) -> str:
        return f"ExponentPushToken[{name}]"

    def _accepted(self) -> list[tuple[str, datetime]]:
        return [
            (r["to"], datetime.fromisoformat(r["received_at"]))
            for r in self.sandbox.received()
            if r["status"] == "ok"
        ]

    def kill(self, token: str) -> None:
        self.sandbox.script_token(token, ticket_error="DeviceNotRegistered")

    def refuse_next(self, status: int, retry_after: float | None = None) -> None:
        self.sandbox.fail_next(1, status=status, retry_after=retry_after)


class _Fcm(ProviderSandbox):
    kind = "fcm"
    sandbox: FcmSandbox
    sandbox_type = FcmSandbox

    def _settings(self, tmp_path: Path) -> dict[str, Any]:
        account = tmp_path / "fcm-service-account.json"
        account.write_text(json.dumps(self.sandbox.service_account(self.base_url, "proj-1")))
        return {"fcm_credentials_file": str(account), "fcm_url": self.base_url}

    def token(self, name: str) -> str:
        return f"{name}:APA91bH-{name}"

    def _accepted(self) -> list[tuple[str, datetime]]:
        return [
            (r["message"]["token"], datetime.fromisoformat(r["at"]))
            for r in self.sandbox.received()
        ]

    def kill(self, token: str) -> None:
        self.sandbox.script_token(token, "UNREGISTERED")

    def refuse_next(self, status: int, retry_after: float | None = None) -> None:
        self.sandbox.fail_next(1, status=status, retry_after=retry_after)

    def least_wait(self, retry_after: float) -> float:
        from tepat.adapters.fcm_push import MIN_RETRY_SECONDS

        return max(MIN_RETRY_SECONDS, retry_after)


class _Apns(ProviderSandbox):
    kind = "apns"
    sandbox: ApnsSandbox
    sandbox_type = ApnsSandbox

    def _settings(self, tmp_path: Path) -> dict[str, Any]:
        key = tmp_path / "AuthKey.p8"
        key.write_text(self.sandbox.signing_key("KEYID12345"))
        return {
            "apns_key_file": str(key),
            "apns_key_id": "KEYID12345",
            "apns_team_id": self.sandbox.team_id,
            "apns_topic": self.sandbox.topic,
            "apns_url": self.base_url,
        }

    def token(self, name: str) -> str:
        return hashlib.sha256(name.encode()).hexdigest()

    def _accepted(self) -> list[tuple[str, datetime]]:
        return [(r["token"], datetime.fromisoformat(r["at"])) for r in self.sandbox.received()]

    def kill(self, token: str) -> None:
        self.sandbox.script_token(token, "Unregistered")

    def refuse_next(self, status: int, retry_after: float | None = None) -> None:
        # APNs's TooManyRequests comes without a Retry-After: Tepat waits its own backoff.
        self.sandbox.fail_next(1, status=status)

    def least_wait(self, retry_after: float) -> float:
        from tepat.adapters.apns_push import THROTTLED_BACKOFF_SECONDS

        return THROTTLED_BACKOFF_SECONDS


class _WebPush(ProviderSandbox):
    kind = "webpush"
    sandbox: WebPushSandbox
    sandbox_type = WebPushSandbox

    def _settings(self, tmp_path: Path) -> dict[str, Any]:
        key = tmp_path / "vapid.pem"
        key.write_text(self.sandbox.vapid_key())
        return {
            "webpush_vapid_private_key_file": str(key),
            "webpush_vapid_subject": "mailto:ops@tepat.test",
            "webpush_url": self.base_url,
        }

    def token(self, name: str) -> str:
        return self.sandbox.subscribe(name)

    def _accepted(self) -> list[tuple[str, datetime]]:
        return [
            (r["subscription"], datetime.fromisoformat(r["at"])) for r in self.sandbox.received()
        ]

    def _recipient(self, token: str) -> str:
        return str(json.loads(token)["endpoint"]).rsplit("/", 1)[1]

    def kill(self, token: str) -> None:
        self.sandbox.script_subscription(self._recipient(token), 410)

    def refuse_next(self, status: int, retry_after: float | None = None) -> None:
        self.sandbox.fail_next(1, status=status, retry_after=retry_after)


SANDBOXES: dict[str, type[ProviderSandbox]] = {s.kind: s for s in (_Expo, _Fcm, _Apns, _WebPush)}


@contextmanager
def served(kind: str, clock: Clock, tmp_path: Path) -> Iterator[ProviderSandbox]:
    """``kind``'s sandbox on a local port, on ``clock`` (the one Tepat runs on)."""
    face = SANDBOXES[kind]
    with running_sandbox(face.sandbox_type(clock=clock)) as server:
        yield face(server.sandbox, server.base_url, tmp_path)
