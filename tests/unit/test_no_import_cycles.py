"""No import cycle among the project's modules, TYPE_CHECKING and function-local imports
included: a cycle is a layer leaking upward that the layers contract (pyproject.toml,
``lint-imports``) cannot name when both ends sit in one layer."""

from __future__ import annotations

import grimp

PACKAGES = ("tepat", "api", "scheduler", "consumers")


def import_cycles(graph: grimp.ImportGraph) -> list[list[str]]:
    """Every strongly connected set of two or more modules (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    cycles: list[list[str]] = []

    def visit(root: str) -> None:
        # iterative: the import chains are deeper than Python's recursion is comfortable with
        work = [(root, iter(sorted(graph.find_modules_directly_imported_by(root))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            module, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append(
                        (child, iter(sorted(graph.find_modules_directly_imported_by(child))))
                    )
                elif child in on_stack:
                    low[module] = min(low[module], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[module])
            if low[module] == index[module]:
                members = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    members.append(member)
                    if member == module:
                        break
                if len(members) > 1:
                    cycles.append(sorted(members))

    for module in sorted(graph.modules):
        if module not in index:
            visit(module)
    return cycles


def test_finds_a_cycle() -> None:
    graph = grimp.ImportGraph()
    for module in ("a", "b", "c", "d"):
        graph.add_module(module)
    graph.add_import(importer="a", imported="b")
    graph.add_import(importer="b", imported="c")
    graph.add_import(importer="c", imported="a")
    graph.add_import(importer="c", imported="d")
    assert import_cycles(graph) == [["a", "b", "c"]]


def test_no_cycle_among_the_project_modules() -> None:
    graph = grimp.build_graph(*PACKAGES, exclude_type_checking_imports=False)
    cycles = import_cycles(graph)
    described = [
        " -> ".join(cycle) + "\n  " + "\n  ".join(_edges_within(graph, cycle)) for cycle in cycles
    ]
    assert not cycles, "import cycles:\n" + "\n".join(described)


def _edges_within(graph: grimp.ImportGraph, cycle: list[str]) -> list[str]:
    members = set(cycle)
    return [
        f"{importer} imports {imported}"
        for importer in cycle
        for imported in sorted(graph.find_modules_directly_imported_by(importer) & members)
    ]
