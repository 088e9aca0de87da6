"""Plugins and ordering for the whole suite.

Plugins: pytester (for the tests of the suite's own plugins), the one that fails a skip
for want of a service under the test command (tests/support/require_services.py), and
the groups of tests that share one xdist worker (tests/support/xdist_groups.py).
"""

from __future__ import annotations

import pytest

pytest_plugins = [
    "pytester",
    "tests.support.require_services",
    "tests.support.xdist_groups",
]

# The longest parts, collected first: the worker that takes the benches (minutes of
# mostly waiting) starts them at once while the others share the rest, instead of
# starting them when the others are nearly done.
LONGEST_FIRST = ("tests/bench/", "tests/model/test_model.py")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    def rank(item: pytest.Item) -> int:
        path = item.nodeid.replace("\\", "/")
        return next(
            (i for i, p in enumerate(LONGEST_FIRST) if path.startswith(p)), len(LONGEST_FIRST)
        )

    items.sort(key=rank)  # stable: each part keeps its own order
