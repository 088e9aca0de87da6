"""The sandbox templates render in: Jinja's immutable sandbox, with size, steps and time bounded.

Jinja's sandbox keeps templates away from Python internals, not from building a gigabyte
string or spinning. Here every way a template builds text is checked *before* the text
is built: sizes given as arguments (:data:`MAX_STRING`; ``*`` widths are refused), any
text or list a step makes (:data:`MAX_TEXT`, by :func:`weight`), loop iterations and
calls (:data:`MAX_STEPS`), time (at every step) and nesting (:data:`MAX_NESTING`, refused
at save time instead of exhausting Python's recursion limit). ``lipsum`` is not offered,
and lists and dicts cannot be changed in place. Every check raises
:class:`~jinja2.exceptions.SecurityError`.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import re
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Set
from dataclasses import dataclass
from typing import Any, Final

from jinja2 import StrictUndefined, nodes
from jinja2.compiler import CodeGenerator, Frame, optimizeconst
from jinja2.exceptions import SecurityError
from jinja2.sandbox import ImmutableSandboxedEnvironment
from jinja2.utils import Namespace

MAX_RANGE: Final = 1000
MAX_STRING: Final = 64 * 1024  # the largest size one argument may ask for (width, repetition)
MAX_TEXT: Final = 512 * 1024  # the most characters one step may build (= the largest part)
# Steps in one render of one part: a loop iteration is one, a call CALL_STEPS (about
# their relative cost): nested loops or a doubly recursive macro stop within tens of ms.
MAX_STEPS: Final = 100_000
CALL_STEPS: Final = 10
MAX_NESTING: Final = 100  # levels of expressions and blocks in one source
RENDER_SECONDS: Final = 1.0
LOOP_GUARD: Final = "_tepat_loop"  # every {% for %} iterates through it (see guard_loops)
_CONCAT_GUARD: Final = "checked_parts"  # the environment method ~ passes its operands to
_MAX_POWER_BITS: Final = 4096
_SMALL: Final = 8  # what weight() counts for a number or an opaque object

# %-format specifiers, with their width and precision (``*``: taken from the arguments)
_SPEC = re.compile(r"%(?:\([^)]*\))?[-+ #0]*(\*|\d+)?(?:\.(\*|\d+))?")
# str methods that pad or repeat to a caller-given size (the filters are checked below)
_SIZED_STR_METHODS = frozenset(
    {"center", "ljust", "rjust", "zfill", "expandtabs", "format", "format_map", "replace"}
)


@dataclass(slots=True)
class _Budget:
    steps: int
    deadline: float
    seconds: float


_BUDGET: contextvars.ContextVar[_Budget | None] = contextvars.ContextVar(
    "tepat_template_budget", default=None
)


@contextlib.contextmanager
def budget(deadline: float, seconds: float) -> Iterator[None]:
    """:data:`MAX_STEPS` steps, and until ``deadline`` (``time.monotonic()``), for the
    render of one part; ``seconds`` is what the message says the limit was."""
    token = _BUDGET.set(_Budget(MAX_STEPS, deadline, seconds))
    try:
        yield
    finally:
        _BUDGET.reset(token)


def step(n: int = 1) -> None:
    left = _BUDGET.get()
    if left is None:  # compile-time constant folding: sizes are still checked
        return
    left.steps -= n
    if left.steps < 0:
        raise SecurityError(
            f"over {MAX_STEPS} steps (loop iterations, and calls at {CALL_STEPS} each):"
            " templates must stay small"
        )
    if time.monotonic() > left.deadline:
        raise SecurityError(f"rendering took over {left.seconds:g} s: templates must stay small")


def _counted(iterable: Iterable[Any]) -> Iterator[Any]:
    for item in iterable:
        step()
        yield item


def weight(value: object, limit: int = MAX_TEXT) -> int:
    """About how many characters ``value`` makes as text (strings, and lists, tuples, sets,
    dicts and namespaces of them, shared parts counted each time they appear), counted
    only until past ``limit``: so weighing a huge value costs no more than a small one."""
    total = 0
    stack = [value]
    while stack and total <= limit:
        v = stack.pop()
        if isinstance(v, str | bytes):
            total += len(v)
        elif isinstance(v, int):
            total += v.bit_length() // 3 + 2
        elif isinstance(v, Mapping):
            total += 2 + 4 * len(v)
            stack.extend(v.keys())
            stack.extend(v.values())
        elif isinstance(v, list | tuple | Set):
            total += 2 + 2 * len(v)
            stack.extend(v)
        elif isinstance(v, Namespace):
            stack.append(vars(v))
        else:
            total += _SMALL
    return total


def _within(size: int, what: str, limit: int = MAX_TEXT) -> None:
    if size > limit:
        raise SecurityError(f"{what} over {limit} characters is not allowed in templates")


def _bounded(n: object, what: str, limit: int = MAX_STRING) -> None:
    if isinstance(n, int) and not isinstance(n, bool) and abs(n) > limit:
        raise SecurityError(f"{what} over {limit} is not allowed in templates")


def _check_format(fmt: str, args: object) -> None:
    """``fmt % args``: no ``*`` widths, each width bounded, and the whole result too."""
    total = len(fmt) + weight(args)
    for m in _SPEC.finditer(fmt):
        for size in m.groups():
            if size == "*":
                raise SecurityError("a '*' width is not allowed in templates")
            if size is not None:
                _bounded(int(size), "a format width")
                total += int(size)
    _within(total, "a formatted string of")


def _read_join(items: Iterable[Any], separator: object) -> list[Any]:
    """The items, read once (a generator: map, select), checked as joined by ``separator``."""
    read = list(items)
    _within(weight(read) + weight(separator) * len(read), "a joined string of")
    return read


def _join(value: Any, d: object = "", attribute: object = None) -> tuple[Any, ...]:
    return (_read_join(value, d), d, attribute)


def _indent(s: object, width: object = 4, *args: Any) -> None:
    text = str(s)
    lines = text.count("\n") + 1
    size = width if isinstance(width, int) else weight(width)
    _bounded(size, "an indent width")
    _within(len(text) + abs(size) * lines, "an indented string of")


def _wordwrap(
    s: object, width: object = 79, _long: object = True, wrapstring: object = None, *_: Any
) -> None:
    text = str(s)
    lines = text.count("\n") + len(text) // max(width if isinstance(width, int) else 1, 1) + 1
    _within(len(text) + weight(wrapstring or "\n") * lines, "a wrapped string of")


def _replace(s: object, old: object = "", new: object = "", *_: Any) -> None:
    text, old_text = str(s), str(old)
    count = text.count(old_text) + 1 if old_text else len(text) + 1
    _within(len(text) + count * weight(new), "a replaced string of")


def _urlize(s: object, *args: Any, **kwargs: Any) -> None:
    text = str(s)
    words = len(text.split()) + 1
    _within(3 * len(text) + words * (weight(args) + weight(kwargs) + 64), "a urlized string of")


def _sum(iterable: object, attribute: object = None, start: object = 0) -> None:
    if not isinstance(start, int | float):
        raise SecurityError("sum adds numbers: a non-numeric start is not allowed in templates")


# Checks before the filter runs, given the filter's arguments (without its context);
# ``join`` hands back its arguments, its items read into a list.
_BEFORE: Final[Mapping[str, Callable[..., Any]]] = {
    "center": lambda s, width=80: _bounded(width, "a center width"),
    "format": lambda s, *args, **kwargs: _check_format(str(s), args or kwargs),
    "indent": _indent,
    "wordwrap": _wordwrap,
    "replace": _replace,
    "urlize": _urlize,
    "slice": lambda value, slices, *_: _bounded(slices, "a number of slices", MAX_RANGE),
    "batch": lambda value, linecount, *_: _bounded(linecount, "a batch size"),
    "sum": _sum,
    "truncate": lambda s, length=255, *_: _bounded(length, "a truncate length", MAX_TEXT),
}


def _guarded(name: str, original: Callable[..., Any]) -> Callable[..., Any]:
    """``original`` with every argument weighed and the checks of :data:`_BEFORE` first."""
    passes_context = getattr(original, "jinja_pass_arg", None) is not None
    before = _BEFORE.get(name)

    @functools.wraps(original)  # keeps jinja_pass_arg: the context still comes first
    def guarded(*args: Any, **kwargs: Any) -> Any:
        context, given = (args[:1], args[1:]) if passes_context else ((), args)
        for arg in (*given, *kwargs.values()):
            _within(weight(arg), f"a value given to {name} of")
        if name == "join" and given:
            given = _join(*given, **kwargs)
            kwargs = {}
        elif before is not None:
            before(*given, **kwargs)
        return original(*context, *given, **kwargs)

    return guarded


def _safe_range(*args: int) -> range:
    r = range(*args)
    if len(r) > MAX_RANGE:
        raise SecurityError(f"range() over {MAX_RANGE} items is not allowed in templates")
    return r


def _finalize(value: Any) -> Any:
    """Every ``{{ value }}`` passes here before it becomes text."""
    _within(weight(value), "a printed value of")
    return value


def _checked_concat(parts: Iterable[str]) -> str:
    """A macro's, call block's or ``{% set %}`` block's text (Jinja's ``concat``)."""
    texts = list(parts)
    _within(sum(len(t) for t in texts), "a block's text of")
    return "".join(texts)


class _CodeGenerator(CodeGenerator):
    """Jinja's, with ``a ~ b`` weighed before it is joined."""

    @optimizeconst
    def visit_Concat(self, node: nodes.Concat, frame: Frame) -> None:
        # As Jinja 3.1's visit_Concat, with the operands passed through checked_parts.
        if frame.eval_ctx.volatile:
            func_name = "(markup_join if context.eval_ctx.volatile else str_join)"
        elif frame.eval_ctx.autoescape:
            func_name = "markup_join"
        else:
            func_name = "str_join"
        self.write(f"{func_name}(environment.{_CONCAT_GUARD}((")
        for arg in node.nodes:
            self.visit(arg, frame)
            self.write(", ")
        self.write(")))")


class Sandbox(ImmutableSandboxedEnvironment):
    """Jinja's immutable sandbox, with sizes, steps and time bounded (see the module)."""

    intercepted_binops = frozenset({"*", "**", "%", "+"})
    code_generator_class = _CodeGenerator
    concat = staticmethod(_checked_concat)

    @staticmethod
    def checked_parts(parts: tuple[Any, ...]) -> tuple[Any, ...]:
        _within(weight(parts), "a ~ of")
        return parts

    def call(self, context: Any, obj: Any, /, *args: Any, **kwargs: Any) -> Any:
        step(CALL_STEPS)
        if isinstance(getattr(obj, "__self__", None), str) and obj.__name__ == "join" and args:
            args = (_read_join(args[0], obj.__self__), *args[1:])
        return super().call(context, obj, *args, **kwargs)

    def is_safe_attribute(self, obj: Any, attr: str, value: Any) -> bool:
        if isinstance(obj, str) and attr in _SIZED_STR_METHODS:
            return False
        return bool(super().is_safe_attribute(obj, attr, value))

    def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
        if operator == "*":
            for seq, n in ((left, right), (right, left)):
                if isinstance(seq, str | list | tuple) and isinstance(n, int):
                    _bounded(weight(seq, MAX_STRING) * n, "a repeated string or list of length")
        elif operator == "+":
            if isinstance(left, str | list | tuple) and isinstance(right, str | list | tuple):
                _within(weight(left) + weight(right), "a sum of")
        elif operator == "**" and isinstance(left, int) and isinstance(right, int):
            if max(abs(left), 2).bit_length() * abs(right) > _MAX_POWER_BITS:
                raise SecurityError("a power this large is not allowed in templates")
        elif operator == "%" and isinstance(left, str):
            _check_format(left, right)
        return super().call_binop(context, operator, left, right)


def environment(autoescape: bool) -> Sandbox:
    env = Sandbox(undefined=StrictUndefined, autoescape=autoescape, finalize=_finalize)
    env.globals.pop("lipsum", None)  # seconds of work for one call, and no use in a message
    env.globals["range"] = _safe_range
    env.globals[LOOP_GUARD] = _counted
    env.filters = {name: _guarded(name, f) for name, f in env.filters.items()}
    return env


def nesting(ast: nodes.Node) -> int:
    """How deep ``ast`` nests, counted without recursion (a deep tree is what is refused),
    stopping at one level past :data:`MAX_NESTING`."""
    deepest = 0
    stack = [(ast, 1)]
    while stack:
        node, depth = stack.pop()
        deepest = max(deepest, depth)
        if depth > MAX_NESTING:
            break
        stack.extend((child, depth + 1) for child in node.iter_child_nodes())
    return deepest


def guard_loops(ast: nodes.Template) -> None:
    """Make each ``{% for %}`` iterate through :func:`_counted`: a step per iteration."""
    for loop in ast.find_all(nodes.For):
        guard = nodes.Call(nodes.Name(LOOP_GUARD, "load"), [loop.iter], [], None, None)
        loop.iter = guard.set_lineno(loop.lineno)


def uses_reserved_name(ast: nodes.Template) -> bool:
    return any(n.name == LOOP_GUARD for n in ast.find_all(nodes.Name))
