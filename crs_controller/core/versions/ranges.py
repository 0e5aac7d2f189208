"""Kubernetes versions and the ranges ``spec.resources[].kubernetesVersions`` holds.

Versions are parsed by ``semver`` (python-semver: SemVer 2.0.0 exactly, pure Python,
typed, maintained), after dropping the leading ``v`` Kubernetes writes ("v1.34.2",
"v1.34.2+vmware.1"). A range is comparators joined by commas, all of which must hold:
``">=1.34.0, <1.35.0"``; an operator is one of ``>= <= > < == !=`` (``=`` or none
means ``==``) and the version beside it is a full ``MAJOR.MINOR.PATCH``. SemVer's own
ordering applies: build metadata is ignored, and a pre-release sorts before its
release (``1.35.0-rc.1`` is inside ``<1.35.0``: an upper bound ``<1.35.0-0`` leaves
out the next minor's pre-releases too).

``overlap`` and ``same_versions`` decide exactly whether two ranges share a version or
hold the same ones (pre-releases included): a range is an interval with finitely many
versions left out, and SemVer's order has a next version after each one.

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


# The least version: nothing sorts before 0.0.0-0.
_LEAST = Version(0, 0, 0, "0")
_NEGATION = {">=": "<", "<": ">=", ">": "<=", "<=": ">", "==": "!=", "=": "!=", "!=": "=="}


def _next(version: Version) -> Version:
    """The version right after ``version`` (build metadata aside): none sorts between
    them. After a release, the next patch's least pre-release; after a pre-release, the
    same one with a ``0`` identifier appended."""
    if version.prerelease is None:
        return Version(version.major, version.minor, version.patch + 1, "0")
    return Version(version.major, version.minor, version.patch, f"{version.prerelease}.0")


def witness(*ranges: VersionRange) -> Version | None:
    """A version in every one of ``ranges``, None when there is none (exactly)."""
    comparators = [c for r in ranges for c in r.comparators]
    pinned = [c.version for c in comparators if c.op in ("==", "=")]
    if pinned:
        return pinned[0] if all(c.holds(pinned[0]) for c in comparators) else None
    lows = [c.version if c.op == ">=" else _next(c.version) for c in comparators if c.op[0] == ">"]
    candidate = max(lows, default=_LEAST)
    # The versions from the greatest lower bound on, in order: each != leaves out at
    # most one, so one of the first len + 1 holds unless an upper bound ends them.
    for _ in range(len(comparators) + 1):
        if all(c.holds(candidate) for c in comparators):
            return candidate
        if any(c.op[0] == "<" and not c.holds(candidate) for c in comparators):
            return None
        candidate = _next(candidate)
    return None  # not reached: see above


def overlap(a: VersionRange, b: VersionRange) -> bool:
    """Some version is in both ranges."""
    return witness(a, b) is not None


def same_versions(a: VersionRange, b: VersionRange) -> bool:
    """The two ranges hold exactly the same versions: neither has one outside the
    other (a version outside a range fails one of its comparators)."""
    return _within(a, b) and _within(b, a)


def _within(a: VersionRange, b: VersionRange) -> bool:
    """Every version of ``a`` is in ``b``: none of ``a`` fails a comparator of ``b``."""
    return all(
        witness(a, VersionRange((_Comparator(_NEGATION[c.op], c.version),))) is None
        for c in b.comparators
    )


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


def below_its_release(versions: VersionRange, version: Version) -> bool:
    """``version`` is a pre-release the range holds while its release is outside it: an
    upper bound at the release (``<1.35.0``) taking ``1.35.0-rc.1`` for the build
    before."""
    return (
        version.prerelease is not None
        and versions.contains(version)
        and not versions.contains(version.finalize_version())
    )


def version_match(versions: VersionRange | None, version: Version | None) -> VersionMatch:
    """Whether a resource whose compiled ``kubernetesVersions`` is ``versions`` (None:
    every version) applies at ``version`` (None: not known)."""
    if versions is None:
        return "yes"
    if version is None:
        return "unknown"
    return "yes" if versions.contains(version) else "outside"
