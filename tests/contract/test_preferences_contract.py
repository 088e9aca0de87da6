"""The contract of preferences (``tepat/ports/repositories/preferences.py``).

Every adapter runs this file through the ``store`` fixture (``tests/contract/conftest.py``).
"""

from __future__ import annotations

from tepat.ports.store import Store


async def test_preferences_merge(store: Store) -> None:
    assert await store.get_preferences("u1") == {}
    assert await store.set_preferences("u1", {"meal": False, "mood": True}) == {
        "meal": False,
        "mood": True,
    }
    merged = await store.set_preferences("u1", {"mood": False, "sleep": True})
    assert merged == {"meal": False, "mood": False, "sleep": True}
    assert await store.get_preferences("u1") == merged
    await store.set_preferences("u2", {"meal": True})
    both = await store.preferences_for_users(["u1", "u2", "u3"])
    assert both["u1"] == merged
    assert both["u2"] == {"meal": True}
    assert both.get("u3", {}) == {}
