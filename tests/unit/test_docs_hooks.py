"""The docs and config/ agree on the Runtime Extension's hooks.

Covers: every `--extension-hooks` value written in README.md, docs/ or config/ (the
setting for a Cluster API without BeforeWorkersUpgrade in its catalog) names every
hook the extension serves but BeforeWorkersUpgrade, in the order discovery lists them;
docs/upgrades.md names the handler of every hook served.
"""

from __future__ import annotations

import re
from pathlib import Path

from crs_controller.app.extension import BEFORE_WORKERS_UPGRADE, HOOKS

ROOT = Path(__file__).resolve().parents[2]
FILES = [
    ROOT / "README.md",
    *sorted((ROOT / "docs").glob("*.md")),
    *sorted((ROOT / "config").rglob("*.yaml")),
]
# The flag, then its value: comma-separated names, possibly on the next comment line.
VALUE = re.compile(r"--extension-hooks[\s#=]+([A-Za-z]+(?:,[A-Za-z]+)*)")


def values() -> list[tuple[str, str]]:
    return [
        (path.relative_to(ROOT).as_posix(), match.group(1))
        for path in FILES
        for match in VALUE.finditer(path.read_text(encoding="utf-8"))
    ]


def test_every_extension_hooks_example_leaves_out_only_before_workers_upgrade() -> None:
    expected = ",".join(h.name for h in HOOKS if h != BEFORE_WORKERS_UPGRADE)
    found = values()
    assert {path for path, _ in found} >= {
        "docs/upgrades.md",
        "config/extension/extensionconfig.yaml",
    }
    assert [(path, value) for path, value in found if value != expected] == []


def test_the_upgrade_guide_names_every_handler() -> None:
    text = (ROOT / "docs" / "upgrades.md").read_text(encoding="utf-8")
    assert [h.handler for h in HOOKS if f"`{h.handler}.crs-controller`" not in text] == []
