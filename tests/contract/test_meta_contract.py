"""The contract of the store-wide settings (``tepat/ports/repositories/meta.py``).

Every adapter runs this file through the ``store`` fixture (``tests/contract/conftest.py``).
"""

from __future__ import annotations

from tepat.ports.store import Store


async def test_meta_set_get_overwrite(store: Store) -> None:
    assert await store.get_meta("tzdata_release") is None
    await store.set_meta("tzdata_release", "2026f")
    await store.set_meta("other", "x")
    await store.set_meta("tzdata_release", "2027a")
    assert await store.get_meta("tzdata_release") == "2027a"
    assert await store.get_meta("other") == "x"
