"""One TLS context per set of arguments for every HTTP client the tests' runtimes make.

httpx builds a context for each client and transport, reading the whole CA bundle each
time (``load_verify_locations``): about a quarter of an API test's time went there, two
per runtime (the webhook channel's transport) and more for the providers' clients, none
of which the tests use over TLS to a public host. The context is the same for the same
arguments, so each is built once per test process. A context given by the caller (a
test's own CA) is passed through as before.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator

import httpx
import httpx._transports.default as httpx_transports
import pytest


@pytest.fixture(scope="session", autouse=True)
def shared_ssl_context() -> Iterator[None]:
    shared = functools.cache(httpx.create_ssl_context)
    with pytest.MonkeyPatch.context() as patch:
        # the name the transports call, and the one Tepat's webhook transport calls
        patch.setattr(httpx_transports, "create_ssl_context", shared)
        patch.setattr(httpx, "create_ssl_context", shared)
        yield
