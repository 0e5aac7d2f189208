"""Function length: no function or method in crs_controller/ runs over 40 lines.

A function's length is counted from its ``def`` line to its last line, decorators
excluded, docstring and comments included (they are read too). Nested functions count
inside their parent and on their own. ruff checks complexity (C901) and statements
(PLR0915) but has no rule for length; this does, with the standard library only.

Run as ``python3 hack/check_shape.py [PATH ...]`` (default: crs_controller/). Exits 1
listing ``path:line function (N lines)`` for each function over the limit, and for
each entry of ``PENDING_SPLITS`` that no longer names a function over the limit.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_PATHS = (ROOT / "crs_controller",)
MAX_LINES = 40  # about one screen

# Functions over the limit that a reshape under way has not split yet: each entry is
# (path from the repository root, qualified name). An entry naming no function over
# the limit fails the check, so the list cannot outlive the functions it excuses.
PENDING_SPLITS: frozenset[tuple[str, str]] = frozenset()

Function = ast.FunctionDef | ast.AsyncFunctionDef


@dataclass(frozen=True)
class LongFunction:
    path: str
    line: int
    name: str  # qualified: Class.method, outer.inner
    lines: int

    def __str__(self) -> str:
        return f"{self.path}:{self.line} {self.name} ({self.lines} lines)"


def _functions(node: ast.AST, prefix: str = "") -> Iterator[tuple[str, Function]]:
    """Every function under node, with its qualified name."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
            name = f"{prefix}{child.name}"
            yield name, child
            yield from _functions(child, f"{name}.")
        elif isinstance(child, ast.ClassDef):
            yield from _functions(child, f"{prefix}{child.name}.")
        else:
            yield from _functions(child, prefix)


def long_functions(source: str, path: str, limit: int = MAX_LINES) -> list[LongFunction]:
    """The functions in source longer than limit lines, def line to last line."""
    found = []
    for name, function in _functions(ast.parse(source, filename=path)):
        end = function.end_lineno if function.end_lineno is not None else function.lineno
        lines = end - function.lineno + 1
        if lines > limit:
            found.append(LongFunction(path, function.lineno, name, lines))
    return found


def _python_files(paths: Iterable[Path]) -> Iterator[Path]:
    for path in paths:
        yield from sorted(path.rglob("*.py")) if path.is_dir() else [path]


def _shown(path: Path) -> str:
    resolved = path.resolve()
    return str(resolved.relative_to(ROOT)) if resolved.is_relative_to(ROOT) else str(path)


def _covered(file: Path, paths: Iterable[Path]) -> bool:
    """Whether file is, or would be, among the files checked under paths."""
    return any(file.resolve().is_relative_to(path.resolve()) for path in paths)


def check(paths: Iterable[Path], pending: frozenset[tuple[str, str]]) -> list[str]:
    """One problem per line: functions over the limit, and stale allow-list entries."""
    problems = []
    excused = set()
    for file in _python_files(paths):
        shown = _shown(file)
        for function in long_functions(file.read_text(encoding="utf-8"), shown):
            if (function.path, function.name) in pending:
                excused.add((function.path, function.name))
            else:
                problems.append(str(function))
    for path, name in sorted(pending - excused):
        if _covered(ROOT / path, paths):
            problems.append(
                f"{path}: {name} is in PENDING_SPLITS but not over {MAX_LINES} lines "
                "any more: remove the entry"
            )
    return problems


def main(argv: list[str]) -> int:
    paths = [Path(arg) for arg in argv] or list(DEFAULT_PATHS)
    problems = check(paths, PENDING_SPLITS)
    for problem in problems:
        print(problem)
    if problems:
        print(f"functions are at most {MAX_LINES} lines (hack/check_shape.py)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
