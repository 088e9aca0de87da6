"""Which app (tenant, issue 23) the running code works for: a context variable.

Each app's loops (consumers, scheduler jobs) are asyncio tasks started inside
:func:`app_context` for that app; a task copies the context it was created in, so every
task those loops start works for the same app without being told. The metrics read it
where they observe (``tepat/metrics.py``: the ``app`` label), so no call site passes it.
Code run outside any app's context works for :data:`~tepat.domain.apps.DEFAULT_APP`,
the deployment as it was before apps.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from tepat.domain.apps import DEFAULT_APP, valid_app_id

_CURRENT_APP: ContextVar[str] = ContextVar("tepat_current_app", default=DEFAULT_APP)


def current_app() -> str:
    """The id of the app the running code works for."""
    return _CURRENT_APP.get()


@contextmanager
def app_context(app_id: str) -> Iterator[None]:
    """Run the block (and every task created in it) for ``app_id``.

    Only a valid app id is accepted: the id becomes a metric label, whose values must
    stay within the apps' own bounded set (never a caller's free text)."""
    if not valid_app_id(app_id):
        raise ValueError(f"not an app id: {app_id!r}")
    token = _CURRENT_APP.set(app_id)
    try:
        yield
    finally:
        _CURRENT_APP.reset(token)
