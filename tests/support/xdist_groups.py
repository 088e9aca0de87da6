"""``--dist loadgroup`` for this suite: xdist's load scheduling, with the tests of each
group of ``GROUPS`` (by path) kept on one worker, one after another.

A worker holds at most one of the units that take minutes (``LONGEST``) at a time: xdist
gives a worker its next unit while two of its tests are still to run, so a long unit
could wait behind another on one worker while the others ran out of work.

Not xdist's own ``xdist_group`` marks: pytest-xdist 3.8 names a marked test's group by
appending ``@group`` to ``item._nodeid``, which pytest 9 no longer reads (a node's id
lives in ``_id``), so every marked test was scheduled on its own, silently.
"""

from __future__ import annotations

from typing import Any

import pytest
from xdist.scheduler import LoadScopeScheduling  # type: ignore[import-untyped]

# A path prefix -> the group whose tests share one worker.
GROUPS = {
    # the benches one after another, never two at once slowing each other (and the runs
    # a bench module caches, one per backend, are made once)
    "tests/bench/": "bench",
    # the module starts its own broker (a JVM) once for all its tests
    "tests/integration/test_activemq_tls.py": "activemq-tls",
}


# The quick bench run on ActiveMQ is the longest unit of the suite and mostly waits (for
# the whole minute its API burst's reminders fall on): it goes beside the other benches
# rather than after them. Only correctness is asserted there, never a timing.
QUICK_RUN_ON_ACTIVEMQ = ("tests/bench/test_bench_quick.py::", "activemq")


# The parts that take minutes (the benches, the model test on each store): tests/conftest.py
# collects them first, and no worker queues one behind another.
LONGEST = ("tests/bench/", "tests/model/test_model.py")


def is_long(nodeid: str) -> bool:
    return nodeid.replace("\\", "/").startswith(LONGEST)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # Collected first, the long parts start at once on the workers that take them (the
    # benches, minutes of mostly waiting) while the others share the rest, instead of
    # starting when the others are nearly done.
    items.sort(key=lambda item: not is_long(item.nodeid))  # stable: each part keeps its order


def group_of(nodeid: str) -> str | None:
    path = nodeid.replace("\\", "/")
    module, backend = QUICK_RUN_ON_ACTIVEMQ
    if path.startswith(module) and f"[{backend}" in path:
        return "bench-activemq"
    return next((g for prefix, g in GROUPS.items() if path.startswith(prefix)), None)


class GroupScheduling(LoadScopeScheduling):  # type: ignore[misc]
    """A group is one unit of work; every other test is a unit of its own."""

    def _split_scope(self, nodeid: str) -> str:
        return group_of(nodeid) or nodeid

    def _assign_work_unit(self, node: Any) -> None:
        # xdist takes the queue's first unit; a worker already holding a long one takes
        # the first short one instead (a long one still, when no short one is left).
        if self._holds_a_long_unit(node):
            short = next(
                (scope for scope, unit in self.workqueue.items() if not is_long(next(iter(unit)))),
                None,
            )
            if short is not None:
                self.workqueue.move_to_end(short, last=False)
        super()._assign_work_unit(node)

    def _holds_a_long_unit(self, node: Any) -> bool:
        return any(
            not done and is_long(nodeid)
            for unit in self.assigned_work.get(node, {}).values()
            for nodeid, done in unit.items()
        )


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> GroupScheduling | None:
    if config.getvalue("dist") != "loadgroup":
        return None  # another --dist: xdist's own
    return GroupScheduling(config, log)
