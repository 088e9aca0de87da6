"""An adapter's HTTP client: at most ``max_connections`` to its provider, and the slots a
request waits in for one of them."""

from __future__ import annotations

import asyncio
from typing import Any, Self

import httpx


class PooledClient:
    """Base of an adapter that owns one ``httpx.AsyncClient`` (closed with it)."""

    def __init__(
        self,
        max_connections: int,
        *,
        timeout: float,
        transport: httpx.AsyncBaseTransport | None,
        **options: Any,
    ) -> None:
        self._client = httpx.AsyncClient(
            timeout=timeout,
            transport=transport,  # tests replace the network; None is httpx's own
            limits=httpx.Limits(
                max_connections=max_connections, max_keepalive_connections=max_connections
            ),
            **options,
        )
        # Wait for a connection slot here rather than in httpx's pool, whose wait counts
        # against the timeout and would turn a busy moment into spurious TryAgains.
        self._slots = asyncio.Semaphore(max_connections)

    async def close(self) -> None:
        await self._client.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
