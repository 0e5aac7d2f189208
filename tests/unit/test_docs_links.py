"""The README and docs/: every relative link resolves.

Covers: each markdown link in README.md and docs/*.md to a repository path names a
file or directory that exists, and each link to a heading (`#anchor`, in the same
file or another markdown file) names a heading that exists, slugged as GitHub slugs
it; every document in docs/ is linked from the README; the README stays a front
door (at most 320 lines). Links inside code blocks and code spans are not links.
Links to other sites are not followed.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
README_MAX_LINES = 320

FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)
CODE_SPAN = re.compile(r"`[^`\n]*`")
LINK = re.compile(r"\[[^\]\n]*\]\(([^)\s]+)\)")
HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$", re.MULTILINE)
EXTERNAL = ("http://", "https://", "mailto:")


def prose(text: str) -> str:
    """The text without code: a `](` inside a code block is not a link."""
    return CODE_SPAN.sub("", FENCE.sub("", text))


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, code marks and punctuation
    dropped, spaces as hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link keeps its text
    return re.sub(r"[^\w\- ]", "", text.lower()).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    seen: Counter[str] = Counter()
    found = set()
    for heading in HEADING.findall(FENCE.sub("", path.read_text(encoding="utf-8"))):
        base = slug(heading)
        found.add(base if seen[base] == 0 else f"{base}-{seen[base]}")
        seen[base] += 1
    return found


def links(path: Path) -> list[str]:
    return LINK.findall(prose(path.read_text(encoding="utf-8")))


def broken(path: Path, target: str) -> str | None:
    """Why a link from ``path`` does not resolve, or None."""
    location, _, anchor = target.partition("#")
    destination = (path.parent / location).resolve() if location else path
    if not destination.exists():
        return f"{target}: no such file"
    if ROOT not in destination.parents and destination != ROOT:
        return f"{target}: outside the repository"
    if anchor and destination.suffix == ".md" and anchor not in anchors(destination):
        return f"{target}: no heading #{anchor} in {destination.relative_to(ROOT)}"
    return None


@pytest.mark.parametrize("path", DOCUMENTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(path: Path) -> None:
    problems = [
        problem
        for target in links(path)
        if not target.startswith(EXTERNAL) and (problem := broken(path, target))
    ]
    assert not problems, problems


def test_every_document_is_linked_from_the_readme() -> None:
    readme = ROOT / "README.md"
    linked = {(ROOT / target.partition("#")[0]).resolve() for target in links(readme)}
    missing = [str(p.relative_to(ROOT)) for p in DOCUMENTS[1:] if p.resolve() not in linked]
    assert not missing, missing


def test_the_readme_is_a_front_door() -> None:
    lines = (ROOT / "README.md").read_text(encoding="utf-8").count("\n")
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines"


@pytest.mark.parametrize(
    ("heading", "anchor"),
    [
        ("Decided where the contract is silent", "decided-where-the-contract-is-silent"),
        (
            "What the controller trusts, and what it refuses",
            "what-the-controller-trusts-and-what-it-refuses",
        ),
        ("Ordering: dependsOn", "ordering-dependson"),
        ("`render -o manifests`", "render--o-manifests"),
        (
            "Why, against Cluster API's ClusterResourceSet",
            "why-against-cluster-apis-clusterresourceset",
        ),
    ],
)
def test_slug_is_githubs(heading: str, anchor: str) -> None:
    assert slug(heading) == anchor


def test_links_in_code_are_not_links() -> None:
    text = "see [a](a.md)\n```sh\n[b](b.md)\n```\nand `[c](c.md)` and [d](d.md#x)\n"
    assert LINK.findall(prose(text)) == ["a.md", "d.md#x"]
