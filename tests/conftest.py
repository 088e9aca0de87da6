"""Plugins and ordering for the whole suite.

Plugins: pytester (for the tests of the suite's own plugins), and the one that fails a
skip for want of a service under the test command (tests/support/require_services.py).
"""

from __future__ import annotations

import pytest

pytest_plugins = ["pytester", "tests.support.require_services"]

# The longest parts, collected first: with several xdist workers, the worker that takes
# the benches (one xdist group, minutes of mostly waiting) starts them at once while the
# others share the rest, instead of starting them when the others are nearly done.
LONGEST_FIRST = ("tests/bench/", "tests/model/test_model.py")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    def rank(item: pytest.Item) -> int:
        path = item.nodeid.replace("\\", "/")
        return next(
            (i for i, prefix in enumerate(LONGEST_FIRST) if path.startswith(prefix)),
            len(LONGEST_FIRST),
        )

    items.sort(key=rank)  # stable: each part keeps its own order
