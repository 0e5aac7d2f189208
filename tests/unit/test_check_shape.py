"""hack/check_shape.py: functions in crs_controller/ are at most 40 lines.

Covers: a function over the limit is listed as ``path:line name (N lines)`` and one at
the limit is not; the count runs from the def line to the last line, decorators
excluded; methods and nested functions are checked and named with their class or
parent; the allow-list excuses exactly its entries, and an entry that no longer
names a function over the limit fails the check (so the list cannot outlive it).
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("check_shape", ROOT / "hack" / "check_shape.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass looks its module up there
    spec.loader.exec_module(module)
    return module


check_shape = _load()


def function(name: str, lines: int, indent: str = "") -> str:
    """Source of a function ``lines`` long, def line included."""
    body = "".join(f"{indent}    x{i} = {i}\n" for i in range(lines - 2))
    return f"{indent}def {name}() -> int:\n{body}{indent}    return 0\n"


def test_a_function_over_the_limit_is_listed_with_its_line_and_length() -> None:
    source = "import os\n\n\n" + function("long", 41)
    (found,) = check_shape.long_functions(source, "pkg/mod.py", limit=40)
    assert str(found) == "pkg/mod.py:4 long (41 lines)"


def test_a_function_at_the_limit_passes() -> None:
    assert check_shape.long_functions(function("short", 40), "pkg/mod.py", limit=40) == []
    assert check_shape.long_functions(function("tiny", 3), "pkg/mod.py", limit=40) == []


def test_decorators_do_not_count() -> None:
    decorated = "@staticmethod\n@property\n" + function("decorated", 40)
    assert check_shape.long_functions(decorated, "pkg/mod.py", limit=40) == []


def test_methods_and_nested_functions_are_named_with_their_parents() -> None:
    outer = "def outer() -> None:\n" + function("inner", 12, indent="    ")
    source = "class Thing:\n" + function("method", 12, indent="    ") + "\n" + outer
    found = check_shape.long_functions(source, "m.py", limit=10)
    assert [(f.name, f.lines) for f in found] == [
        ("Thing.method", 12),
        ("outer", 13),
        ("outer.inner", 12),
    ]


def test_async_functions_are_checked() -> None:
    source = function("waits", 12).replace("def ", "async def ", 1)
    assert [f.name for f in check_shape.long_functions(source, "m.py", limit=10)] == ["waits"]


def test_the_allow_list_excuses_its_entries_and_fails_when_one_is_stale(tmp_path: Path) -> None:
    module = tmp_path / "mod.py"
    module.write_text(function("long", 50) + "\n\n" + function("short", 5))
    shown = check_shape._shown(module)
    assert check_shape.check([tmp_path], frozenset()) == [f"{shown}:1 long (50 lines)"]
    assert check_shape.check([tmp_path], frozenset({(shown, "long")})) == []
    (stale,) = check_shape.check([tmp_path], frozenset({(shown, "long"), (shown, "short")}))
    assert "short is in PENDING_SPLITS but not over 40 lines" in stale


def test_main_fails_listing_the_long_functions(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "mod.py").write_text(function("long", 41))
    assert check_shape.main([str(tmp_path)]) == 1
    assert "long (41 lines)" in capsys.readouterr().out
    (tmp_path / "mod.py").write_text(function("short", 40))
    assert check_shape.main([str(tmp_path)]) == 0
