"""docs/ARCHITECTURE.md names only files and symbols that exist.

The convention (stated at the top of the page):

- a file or folder is written as its path from the repository root, ending in a file
  extension or in ``/``: ``tepat/domain/planning.py``, ``tests/contract/``; ``*`` may
  stand for one folder (``tepat/adapters/*/ops_views.py``: at least one must match);
- a bare file name is at the repository root (``constraints.txt``) or in the folder of
  the last path before it on the same line (``schema.py`` after ``tepat/adapters/sqlite/``);
- a symbol is written ``path.py:Name`` or ``path.py:Class.member``: a function, class
  or assignment that the file itself defines (an import does not count).

Paths are read from inline code and from code blocks (the flow diagram) alike; URLs
(``stomp://``) and HTTP paths (``/v1/events``) are not files.
"""

from __future__ import annotations

import ast
import re
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs/ARCHITECTURE.md"

EXTENSIONS = ("py", "md", "sh", "yml", "yaml", "xml", "json", "toml", "txt", "html", "css", "js")
_EXT = "|".join(EXTENSIONS)
# A path: segments of word characters, dots, dashes or *, joined by /, ending in
# .<extension> or in /. Not preceded by ":" or "/" (a URL's or an HTTP path's tail).
PATH = re.compile(
    rf"(?<![\w:/.*-])(?P<path>(?:[\w.*-]+/)*[\w*-][\w.*-]*\.(?:{_EXT})|(?:[\w.*-]+/)+)"
    rf"(?::(?P<symbol>[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*))?(?![\w/])"
)


def references(text: str) -> list[tuple[int, tuple[str, ...], str | None]]:
    """(line number, the paths it may be, symbol or None) for every reference."""
    found: list[tuple[int, tuple[str, ...], str | None]] = []
    in_block = False
    for number, line in enumerate(text.splitlines(), start=1):
        if line.startswith("```"):
            in_block = not in_block
            continue
        spans = [line] if in_block else re.findall(r"`([^`]+)`", line)
        folder: str | None = None
        for span in spans:
            for m in PATH.finditer(span):
                path, symbol = m["path"], m["symbol"]
                candidates: tuple[str, ...] = (path,)
                if "/" in path:
                    folder = path if path.endswith("/") else path.rsplit("/", 1)[0] + "/"
                elif folder is not None:
                    candidates = (path, folder + path)
                found.append((number, candidates, symbol))
    return found


def matches(path: str) -> list[Path]:
    if "*" in path:
        return sorted(ROOT.glob(path.rstrip("/")))
    target = ROOT / path
    return [target] if target.exists() else []


@cache
def definitions(file: Path) -> frozenset[str]:
    """Every name ``file`` defines at module level, and ``Class.member`` for its classes."""
    tree = ast.parse(file.read_text(), filename=str(file))
    names: set[str] = set()

    def walk(body: list[ast.stmt], prefix: str) -> None:
        for node in body:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                names.add(prefix + node.name)
            elif isinstance(node, ast.ClassDef):
                names.add(prefix + node.name)
                walk(node.body, f"{prefix}{node.name}.")
            elif isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for target in targets:
                    for name in ast.walk(target):
                        if isinstance(name, ast.Name):
                            names.add(prefix + name.id)
            elif isinstance(node, ast.If | ast.Try | ast.With):
                for part in ("body", "orelse", "finalbody"):
                    walk(getattr(node, part, []), prefix)

    walk(tree.body, "")
    return frozenset(names)


def test_every_path_and_symbol_named_in_the_architecture_page_exists() -> None:
    refs = references(DOC.read_text())
    assert len(refs) > 100, "the convention found almost nothing: has the page's form changed?"
    problems = []
    for line, candidates, symbol in refs:
        found = [file for path in candidates for file in matches(path)]
        named = " or ".join(candidates)
        if not found:
            problems.append(f"line {line}: {named} does not exist")
        elif symbol is not None and not any(symbol in definitions(f) for f in found):
            problems.append(f"line {line}: {named} defines no {symbol}")
    assert not problems, "docs/ARCHITECTURE.md is out of date:\n" + "\n".join(problems)


def test_the_convention_reads_paths_symbols_and_bare_names() -> None:
    text = "\n".join(
        [
            "| x | `tepat/domain/planning.py:plan_oneoff`; `codecs.py`, `tests/contract/` |",
            "see `stomp+ssl://host:61614/x.py`, `/v1/events`, `multipart/alternative`",
            "```",
            " api/ ──> tepat/services/planning/creator.py:Creator.replan_user ──> Store",
            "```",
        ]
    )
    assert references(text) == [
        (1, ("tepat/domain/planning.py",), "plan_oneoff"),
        (1, ("codecs.py", "tepat/domain/codecs.py"), None),
        (1, ("tests/contract/",), None),
        (4, ("api/",), None),
        (4, ("tepat/services/planning/creator.py",), "Creator.replan_user"),
    ]


def test_a_missing_file_or_symbol_is_reported() -> None:
    assert matches("tepat/no_such_module.py") == []
    assert matches("tepat/adapters/*/ops_views.py")
    assert "Creator.replan_user" in definitions(ROOT / "tepat/services/planning/creator.py")
    assert "no_such_function" not in definitions(ROOT / "tepat/services/planning/creator.py")
    # imported, not defined there
    assert "Settings" not in definitions(ROOT / "tepat/runtime.py")
