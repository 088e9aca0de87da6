"""Where a webhook may connect (SSRF): a URL's host is resolved and every address it
resolves to is checked (``tepat.domain.webhooks.address_refusal``): loopback, private,
link-local, multicast and reserved addresses (IPv4 and IPv6, IPv4-mapped included) are
refused unless ``TEPAT_WEBHOOK_ALLOW_PRIVATE_HOSTS`` names the host or its network.

Checked twice: when a subscription is registered (:func:`check_target`, a clear 422),
and at every connection (:class:`GuardedTransport`), since DNS may answer differently
later. The connection goes to the address that was checked, never to a second lookup's
answer; TLS still verifies the certificate against (and sends SNI for) the host name,
and the ``Host`` header is the URL's.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Iterable
from urllib.parse import urlsplit

import httpcore
import httpx

from tepat.adapters.expo_outcomes import KEEPALIVE_EXPIRY_SECONDS
from tepat.domain.errors import DomainError
from tepat.domain.webhooks import (
    IPAddress,
    TargetPolicy,
    check_target_address,
    check_target_host,
    check_target_ip_literal,
)

# A registration waits this long for DNS; a name that does not resolve yet is accepted
# (every send checks again) rather than refused on a slow resolver.
REGISTRATION_LOOKUP_SECONDS = 3.0
_SEND_LOOKUP_SECONDS = 10.0


class TargetRefused(httpcore.ConnectError):
    """The host resolves to an address webhooks may not reach; ``reason`` says which."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


async def resolve(host: str, port: int, timeout: float) -> list[IPAddress]:  # noqa: ASYNC109
    """Every address ``host`` resolves to (an address literal: itself)."""
    literal = host.strip("[]")
    try:
        return [ipaddress.ip_address(literal)]
    except ValueError:
        pass
    loop = asyncio.get_running_loop()
    infos = await asyncio.wait_for(
        loop.getaddrinfo(literal, port, type=socket.SOCK_STREAM), timeout
    )
    found = dict.fromkeys(ipaddress.ip_address(str(info[4][0]).split("%", 1)[0]) for info in infos)
    return list(found)


def _checked(host: str, addresses: Iterable[IPAddress], policy: TargetPolicy) -> list[IPAddress]:
    """All of ``addresses`` if every one may be reached: one refused address refuses the
    host (a name resolving to a public and a private address is not trusted)."""
    chosen = list(addresses)
    for address in chosen:
        check_target_address(host, address, policy)
    return chosen


async def check_target(url: str, policy: TargetPolicy) -> None:
    """At registration: DomainError("url") when the URL's host is refused. A name that
    does not resolve (now) is accepted: the send-time check applies to it."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    check_target_host(host, policy)
    check_target_ip_literal(host, policy)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        addresses = await resolve(host, port, REGISTRATION_LOOKUP_SECONDS)
    except (OSError, TimeoutError, UnicodeError):
        return
    _checked(host, addresses, policy)


class _GuardedBackend(httpcore.AsyncNetworkBackend):
    """Resolves, checks, then connects to a checked address (not to the name)."""

    def __init__(self, policy: TargetPolicy) -> None:
        self._policy = policy
        self._inner = httpcore.AnyIOBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,  # noqa: ASYNC109
        local_address: str | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        try:
            check_target_host(host, self._policy)
            addresses = _checked(
                host, await resolve(host, port, timeout or _SEND_LOOKUP_SECONDS), self._policy
            )
        except DomainError as e:
            raise TargetRefused(e.message) from None
        except (OSError, TimeoutError, UnicodeError) as e:
            raise httpcore.ConnectError(f"cannot resolve {host}: {e}") from None
        last: Exception = httpcore.ConnectError(f"no address for {host}")
        for address in addresses:
            try:
                return await self._inner.connect_tcp(
                    str(address), port, timeout, local_address, socket_options
                )
            except (httpcore.ConnectError, httpcore.ConnectTimeout) as e:
                last = e
        raise last

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,  # noqa: ASYNC109
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        raise httpcore.ConnectError("webhooks never connect to a Unix socket")

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


class GuardedTransport(httpx.AsyncHTTPTransport):
    """httpx's transport on a connection pool whose every connection is checked.
    Environment proxies are not used (a transport given to a client replaces them): a
    proxy would connect on our behalf, past the check."""

    def __init__(self, policy: TargetPolicy, max_connections: int) -> None:
        super().__init__()
        # httpx 0.28 takes no network backend: the pool it made is replaced by one with
        # the same TLS defaults and ours.
        self._pool = httpcore.AsyncConnectionPool(
            ssl_context=httpx.create_ssl_context(),
            max_connections=max_connections,
            max_keepalive_connections=max_connections,
            keepalive_expiry=KEEPALIVE_EXPIRY_SECONDS,
            network_backend=_GuardedBackend(policy),
        )
