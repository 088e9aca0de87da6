"""``--dist loadgroup`` for this suite: xdist's load scheduling, with the tests of each
group (``group_of``: a module that starts its own broker, the quick bench run of one
backend) kept on one worker, one after another.

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
    # the module starts its own broker (a JVM) once for all its tests
    "tests/integration/test_activemq_tls.py": "activemq-tls",
}

# The quick bench run of every scenario, made once per backend and cached by the module
# for its tests: those of one backend share a worker. Every other bench test is a unit of
# its own: the benches assert correctness, never a timing, so two may run at once.
QUICK_RUN = "tests/bench/test_bench_quick.py::"
QUICK_RUN_BACKENDS = ("embedded", "activemq")

# The parts that take minutes (the model test on each store, the benches), longest
# first: collected first, they start at once on the workers that take them while the
# others share the rest, instead of when the others are nearly done; and no worker
# queues one behind another.
LONGEST = ("tests/model/test_model.py", "tests/bench/")


def is_long(nodeid: str) -> bool:
    return nodeid.replace("\\", "/").startswith(LONGEST)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    def rank(item: pytest.Item) -> int:
        path = item.nodeid.replace("\\", "/")
        return next((i for i, p in enumerate(LONGEST) if path.startswith(p)), len(LONGEST))

    items.sort(key=rank)  # stable: each part keeps its own order


def group_of(nodeid: str) -> str | None:
    path = nodeid.replace("\\", "/")
    if path.startswith(QUICK_RUN):
        return next((f"bench-{b}" for b in QUICK_RUN_BACKENDS if f"[{b}" in path), None)
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
