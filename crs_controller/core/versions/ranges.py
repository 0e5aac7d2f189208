"""Kubernetes versions and the ranges ``spec.resources[].kubernetesVersions`` holds.

Versions are parsed by ``semver`` (python-semver: SemVer 2.0.0 exactly, pure Python,
typed, maintained), after dropping the leading ``v`` Kubernetes writes ("v1.34.2",
"v1.34.2+vmware.1"). A range is comparators joined by commas, all of which must hold:
``">=1.34.0, <1.35.0"``; an operator is one of ``>= <= > < == !=`` (``=`` or none
means ``==``) and the version beside it is a full ``MAJOR.MINOR.PATCH``. SemVer's own
ordering applies: build metadata is ignored, and a pre-release sorts before its
release (``1.35.0-rc.1`` is inside ``<1.35.0``).

A range is compiled once, when the CRS is parsed; a malformed one is an error naming
the comparator, never quoting the text.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from semver import Version

MAX_COMPARATORS = 10

_COMPARATOR = re.compile(r"^(>=|<=|==|!=|>|<|=)?\s*v?(\S+)$")
_OPERATORS: dict[str, Callable[[int, int], bool]] = {
    ">=": operator.ge,
    "<=": operator.le,
    ">": operator.gt,
    "<": operator.lt,
    "==": operator.eq,
    "=": operator.eq,
    "!=": operator.ne,
}


def parse_version(text: str) -> Version | None:
    """A Kubernetes version ("v1.34.2", "1.34.2", "v1.34.2+build"), None if it is not
    one."""
    if not isinstance(text, str) or len(text) > 128:
        return None
    try:
        return Version.parse(text.removeprefix("v"))
    except ValueError:
        return None


@dataclass(frozen=True)
class _Comparator:
    op: str
    version: Version

    def holds(self, version: Version) -> bool:
        return _OPERATORS[self.op](version.compare(self.version), 0)


@dataclass(frozen=True)
class VersionRange:
    """A compiled range: ``contains`` is true when every comparator holds."""

    comparators: tuple[_Comparator, ...]

    def contains(self, version: Version) -> bool:
        return all(c.holds(version) for c in self.comparators)


def compile_range(text: str) -> VersionRange:
    """Compile a range; raises ValueError saying what is wrong (without the text)."""
    parts = [p.strip() for p in text.split(",")]
    if len(parts) > MAX_COMPARATORS:
        raise ValueError(f"more than {MAX_COMPARATORS} comparators")
    comparators = []
    for n, part in enumerate(parts, start=1):
        found = _COMPARATOR.match(part)
        version = parse_version(found.group(2)) if found else None
        if found is None or version is None:
            raise ValueError(
                f"comparator {n} is not an operator (>=, <=, >, <, ==, !=) and a version "
                "MAJOR.MINOR.PATCH"
            )
        comparators.append(_Comparator(found.group(1) or "==", version))
    return VersionRange(tuple(comparators))


# Does a resource apply at a cluster's version: "yes", "outside" its range, or
# "unknown" (it has a range and the version is not known).
VersionMatch = Literal["yes", "outside", "unknown"]


def version_match(versions: VersionRange | None, version: Version | None) -> VersionMatch:
    """Whether a resource whose compiled ``kubernetesVersions`` is ``versions`` (None:
    every version) applies at ``version`` (None: not known)."""
    if versions is None:
        return "yes"
    if version is None:
        return "unknown"
    return "yes" if versions.contains(version) else "outside"
