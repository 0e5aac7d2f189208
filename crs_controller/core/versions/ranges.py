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
versions left out, and SemVer's order has a next version after each one, so each range
has one canonical form (``span``) that equal sets of versions share.

A range is compiled once, when the CRS is parsed; a malformed one is an error naming
the comparator, never quoting the text.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable, Sequence
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


def _next(version: Version) -> Version:
    """The version right after ``version`` (build metadata aside): none sorts between
    them. After a release, the next patch's least pre-release; after a pre-release, the
    same one with a ``0`` identifier appended."""
    if version.prerelease is None:
        return Version(version.major, version.minor, version.patch + 1, "0")
    return Version(version.major, version.minor, version.patch, f"{version.prerelease}.0")


@dataclass(frozen=True)
class Span:
    """The versions of a range in one canonical form: from ``low`` (held) up to
    ``high`` (left out; None: no end) but the ``holes``. Canonical: ``low`` is no hole,
    the version right before ``high`` is none, every hole is between them. Two ranges
    hold the same versions exactly when their spans are equal (whatever comparators
    spell them: ``>1.0.0`` and ``>=1.0.1-0``, ``<=1.0.0`` and ``<1.0.1-0``)."""

    low: Version
    high: Version | None
    holes: frozenset[Version]

    def meets(self, other: Span) -> bool:
        """Some version is in both: the least of the common interval that both leave
        in (each hole leaves out one, so this walks at most past all of them)."""
        low = max(self.low, other.low)
        highs = [h for h in (self.high, other.high) if h is not None]
        holes = self.holes | other.holes
        while low in holes:
            low = _next(low)
        return not highs or low < min(highs)


def _bounds(comparators: tuple[_Comparator, ...]) -> tuple[Version, Version | None]:
    """The greatest lower bound (held) and the least upper bound (left out)."""
    lows, highs = [_LEAST], []
    for c in comparators:
        if c.op in ("==", "=", ">=", ">"):
            lows.append(_next(c.version) if c.op == ">" else c.version)
        if c.op in ("==", "=", "<=", "<"):
            highs.append(c.version if c.op == "<" else _next(c.version))
    return max(lows), min(highs, default=None)


def span(versions: VersionRange) -> Span | None:
    """``versions`` in canonical form, None when it holds no version."""
    low, high = _bounds(versions.comparators)
    holes = {
        c.version
        for c in versions.comparators
        if c.op == "!=" and low <= c.version and (high is None or c.version < high)
    }
    while low in holes:  # a hole at the start: the range starts right after it
        holes.remove(low)
        low = _next(low)
    before = {_next(h): h for h in holes}
    while high is not None and high in before:  # a hole right before the end ends it
        high = before.pop(high)
        holes.remove(high)
    if high is not None and low >= high:
        return None
    return Span(low, high, frozenset(holes))


def witness(*ranges: VersionRange) -> Version | None:
    """A version in every one of ``ranges``, None when there is none (exactly): the
    least one."""
    common = span(VersionRange(tuple(c for r in ranges for c in r.comparators)))
    return None if common is None else common.low


def overlap(a: VersionRange, b: VersionRange) -> bool:
    """Some version is in both ranges."""
    return witness(a, b) is not None


def same_versions(a: VersionRange, b: VersionRange) -> bool:
    """The two ranges hold exactly the same versions."""
    return span(a) == span(b)


def first_partial_overlap(ranges: Sequence[VersionRange | None]) -> tuple[int, int] | None:
    """The first two ``ranges`` (by the later one's position, then the earlier one's)
    that share a version but not all of them, None when there are none (None ranges
    take no part). Each range is put in canonical form once, so the check costs
    O(n log n) comparisons however many ranges share versions; only when two clash
    is it repeated, log n times, to find the first pair."""
    spans = [None if r is None else span(r) for r in ranges]
    if not _partial_overlap(spans):
        return None
    short, long = 1, len(spans)  # the least prefix with a clash is longer than short
    while short + 1 < long:
        middle = (short + long) // 2
        short, long = (short, middle) if _partial_overlap(spans[:middle]) else (middle, long)
    later = spans[long - 1]
    assert later is not None
    earlier = next(
        i
        for i, s in enumerate(spans[: long - 1])
        if s is not None and s != later and s.meets(later)
    )
    return earlier, long - 1


def _partial_overlap(spans: Sequence[Span | None]) -> bool:
    """Two different spans share a version. Swept by their lows: a span can only meet
    one that starts before it and has not ended there (``open``). Those left open are
    pairwise apart, each starting inside every one opened before it (so on a hole of
    it): there are never more than one hole per comparator, plus one, of them."""
    distinct = sorted({s for s in spans if s is not None}, key=lambda s: s.low)
    open_: list[Span] = []
    for current in distinct:
        open_ = [s for s in open_ if s.high is None or current.low < s.high]
        if any(s.meets(current) for s in open_):
            return True
        open_.append(current)
    return False


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
