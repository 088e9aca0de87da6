"""The contract of the Store as a whole (``tepat/ports/store.py``): opening it again, empty inputs.

Every adapter runs this file through the ``store`` fixture (``tests/contract/conftest.py``).
"""

from __future__ import annotations

import pytest

from tepat.ports.store import Store
from tests.contract.records import at, msg


async def test_open_again_is_harmless(store: Store) -> None:
    await store.insert_messages([msg("a")])
    await store.open()
    await store.ping()
    assert await store.get_message(msg("a").id) == msg("a")


@pytest.mark.parametrize("count", [0, 1])
async def test_empty_and_tiny_inputs(store: Store, count: int) -> None:
    ms = [msg(f"m{n}") for n in range(count)]
    result = await store.insert_messages(ms)
    assert (len(result.created), result.existing) == (count, 0)
    assert await store.claim([], at(0)) == []
    await store.add_tickets([])
