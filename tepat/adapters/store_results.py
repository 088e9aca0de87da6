"""How both store adapters shape what a query read into what the repository ports return."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Hashable, Iterable, Sequence
from typing import TypeVar

T = TypeVar("T")
K = TypeVar("K", bound=Hashable)


def grouped(items: Iterable[T], key: Callable[[T], K]) -> dict[K, list[T]]:
    """``items`` by ``key``, each group in the order read; keys with none are absent."""
    groups: dict[K, list[T]] = {}
    for item in items:
        groups.setdefault(key(item), []).append(item)
    return groups


def in_asked_order(asked: Sequence[K], found: Iterable[T], key: Callable[[T], K]) -> list[T]:
    """``found`` in the order of ``asked`` (a query returns its own), each once, those
    not found left out."""
    by_key = {key(item): item for item in found}
    return [by_key[k] for k in dict.fromkeys(asked) if k in by_key]


async def keyset_pages(
    page: Callable[[K], Awaitable[list[T]]], key: Callable[[T], K], after: K, size: int
) -> AsyncIterator[list[T]]:
    """Each page ``page(after)`` reads, every next one after the last item's ``key``, until
    an empty or short page (of fewer than ``size``): flat memory and cost per page, where
    an offset would read every skipped row again."""
    while items := await page(after):
        yield items
        if len(items) < size:
            return
        after = key(items[-1])
