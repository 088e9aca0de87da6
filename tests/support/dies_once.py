"""A store whose process "dies" once at a chosen write: for tests of what a provider's
retry finds after a crash between two writes."""

from __future__ import annotations

from typing import Any

from tepat.ports.store import Store


class Died(Exception):
    """The process died here."""


class DiesOnce:
    """The store, except that the first call of ``method`` dies: before it writes
    (``record_provider_event``: the act is done, the record is not) or right after
    (``transition_many``: the status moved, what follows did not happen)."""

    def __init__(self, inner: Store, method: str, *, after: bool = False) -> None:
        self._inner = inner
        self._method = method
        self._after = after
        self.died = False

    def __getattr__(self, name: str) -> Any:
        real = getattr(self._inner, name)
        if name != self._method:
            return real

        async def dying(*args: Any, **kw: Any) -> Any:
            if self.died:
                return await real(*args, **kw)
            self.died = True
            if self._after:
                await real(*args, **kw)
            raise Died(name)

        return dying
