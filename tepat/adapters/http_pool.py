"""An adapter's HTTP client: at most ``max_connections`` to its provider, and the slots a
request waits in for one of them."""

from __future__ import annotations

import asyncio
from typing import Any, Self

import httpx

from tepat.adapters.expo_outcomes import KEEPALIVE_EXPIRY_SECONDS, SendProgress
from tepat.adapters.webhook_target import TargetRefused
from tepat.ports.try_again import TryAgain


class PooledClient:
    """Base of an adapter that owns one ``httpx.AsyncClient`` (closed with it)."""

    def __init__(
        self,
        max_connections: int,
        *,
        timeout: float,
        transport: httpx.AsyncBaseTransport | None,
        max_in_flight: int | None = None,
        **options: Any,
    ) -> None:
        self._client = httpx.AsyncClient(
            timeout=timeout,
            transport=transport,  # tests replace the network; None is httpx's own
            limits=httpx.Limits(
                max_connections=max_connections,
                max_keepalive_connections=max_connections,
                keepalive_expiry=KEEPALIVE_EXPIRY_SECONDS,
            ),
            **options,
        )
        # Wait for a connection slot (over HTTP/2, a stream: ``max_in_flight``) here rather
        # than in httpx's pool, whose wait counts against the timeout and would turn a busy
        # moment into spurious TryAgains.
        self._slots = asyncio.Semaphore(max_in_flight or max_connections)

    async def _post_in_slot(
        self, url: str, provider: str, **request: Any
    ) -> httpx.Response | TryAgain:
        """:meth:`_post_traced` once a connection is free."""
        async with self._slots:
            return await self._post_traced(url, provider, **request)

    async def _post_traced(
        self, url: str, provider: str, **request: Any
    ) -> httpx.Response | TryAgain:
        """POST; a network error or timeout is TryAgain, maybe sent once the body went out
        (:class:`SendProgress`). A connection a
        :class:`~tepat.adapters.webhook_target.GuardedTransport` refused raises
        :class:`~tepat.adapters.webhook_target.TargetRefused`."""
        progress = SendProgress()
        try:
            return await self._client.post(url, extensions={"trace": progress.trace}, **request)
        except httpx.HTTPError as e:
            if isinstance(e.__cause__, TargetRefused):
                # Not the provider's failure: an address it may not reach.
                raise e.__cause__ from e
            return progress.failure(e, provider)

    async def close(self) -> None:
        await self._client.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
