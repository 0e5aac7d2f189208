"""Kubernetes versions and ``kubernetesVersions`` ranges (``core.versions.ranges``): tables
for parsing (leading v, build metadata, non-strings), each operator, comma-joined
comparators and whitespace, pre-releases before their release, malformed ranges
refused naming the comparator and never quoting the text, too many comparators, and
``version_match``; then properties against an independent SemVer ordering — a
two-sided range holds exactly between its ends, a comparator and its negation split
every version, a formatted version parses back to itself. Ranges sharing a version:
``overlap`` and ``same_versions`` in tables (touching ends, pre-releases, nothing
between a version and the next) and against brute force over the bounds and the
versions right after them, and a CRS refusing two builds that share a version, naming
both resources, while the documented 1.33/1.34 ranges and one build split over two
resources are taken, the first clashing pair is the one named (against every pair
tried in turn), and a hundred hostile ranges cost a bounded number of version
comparisons; the documented ``<1.35.0-0`` bound leaves 1.35.0-rc.1 out."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from semver import Version

from crs_controller.core.errors import InvalidSpec
from crs_controller.core.spec.objects import CRS, parse_crs
from crs_controller.core.versions.ranges import (
    MAX_COMPARATORS,
    compile_range,
    first_partial_overlap,
    overlap,
    parse_version,
    same_versions,
    version_match,
    witness,
)

from .builders import crs


def v(text: str) -> Version:
    parsed = parse_version(text)
    assert parsed is not None, text
    return parsed


# --- parsing versions ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("v1.34.2", (1, 34, 2, None, None)),
        ("1.34.2", (1, 34, 2, None, None)),
        ("v1.34.2+vmware.1", (1, 34, 2, None, "vmware.1")),
        ("v1.35.0-rc.1", (1, 35, 0, "rc.1", None)),
        ("v1.35.0-alpha.0+k3s1", (1, 35, 0, "alpha.0", "k3s1")),
    ],
)
def test_kubernetes_versions_parse(text: str, expected: tuple[object, ...]) -> None:
    parsed = v(text)
    assert (parsed.major, parsed.minor, parsed.patch, parsed.prerelease, parsed.build) == expected


@pytest.mark.parametrize(
    "text",
    ["", "v", "1.34", "v1", "1.34.x", "1.34.2.1", "vv1.34.2", "latest", "1.34.2-", "1" * 130],
)
def test_what_is_not_a_version_is_none(text: str) -> None:
    assert parse_version(text) is None


@pytest.mark.parametrize("value", [None, 1.34, 134, b"1.34.2", ["v1.34.2"], {"v": "1.34.2"}])
def test_a_non_string_is_not_a_version(value: object) -> None:
    assert parse_version(value) is None  # type: ignore[arg-type]


# --- ranges --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "inside", "outside"),
    [
        (">=1.34.0", ["1.34.0", "1.34.1", "2.0.0"], ["1.33.99", "1.34.0-rc.1"]),
        (">1.34.0", ["1.34.1", "1.35.0-rc.1"], ["1.34.0", "1.33.0"]),
        ("<=1.34.0", ["1.34.0", "1.34.0-rc.1", "1.0.0"], ["1.34.1"]),
        ("<1.35.0", ["1.34.9", "1.35.0-rc.1", "1.35.0-alpha.0"], ["1.35.0", "1.35.1"]),
        ("==1.34.2", ["1.34.2"], ["1.34.1", "1.34.3", "1.34.2-rc.1"]),
        ("=1.34.2", ["1.34.2"], ["1.34.3"]),
        ("1.34.2", ["1.34.2"], ["1.34.3"]),
        ("!=1.34.2", ["1.34.1", "1.34.3"], ["1.34.2"]),
    ],
)
def test_each_operator(text: str, inside: list[str], outside: list[str]) -> None:
    compiled = compile_range(text)
    assert [s for s in inside if not compiled.contains(v(s))] == []
    assert [s for s in outside if compiled.contains(v(s))] == []


@pytest.mark.parametrize(
    "text",
    [
        ">=1.34.0, <1.35.0",
        ">=1.34.0,<1.35.0",
        "  >= 1.34.0 ,\t< 1.35.0  ",
        ">=v1.34.0, <v1.35.0",
        ">= v1.34.0, < v1.35.0",
        ">=1.34.0+build.1, <1.35.0+build.2",  # build metadata is ignored in a range too
    ],
)
def test_comma_joined_comparators_all_hold(text: str) -> None:
    compiled = compile_range(text)
    assert compiled.contains(v("1.34.0")) and compiled.contains(v("v1.34.9"))
    assert compiled.contains(v("1.35.0-rc.1"))  # a pre-release sorts before its release
    assert not compiled.contains(v("1.33.9")) and not compiled.contains(v("1.35.0"))


def test_build_metadata_is_ignored() -> None:
    assert compile_range("==1.34.2").contains(v("v1.34.2+vmware.1"))
    assert not compile_range("!=1.34.2").contains(v("v1.34.2+eks-abc"))
    assert not compile_range(">1.34.2").contains(v("1.34.2+zzz"))


def test_pre_releases_order_by_their_identifiers() -> None:
    order = ["1.35.0-alpha", "1.35.0-alpha.1", "1.35.0-beta.2", "1.35.0-beta.11", "1.35.0-rc.1"]
    for lower, higher in zip(order, [*order[1:], "1.35.0"], strict=True):
        assert compile_range(f"<{higher}").contains(v(lower)), (lower, higher)
        assert not compile_range(f"<{lower}").contains(v(higher)), (lower, higher)


SECRET = "s3cr3t"


@pytest.mark.parametrize(
    ("text", "number"),
    [
        ("", 1),
        (" ", 1),
        (f">={SECRET}", 1),
        (f">=1.34.0, <{SECRET}", 2),
        (">=1.34.0,", 2),
        (f",{SECRET}", 1),
        (">=1.34, <1.35", 1),
        ("=>1.34.0", 1),
        ("~1.34.0", 1),
        ("^1.34.0", 1),
        (">>1.34.0", 1),
        (">=1.34.0 <1.35.0", 1),  # comparators are joined by commas only
        (f">=1.0.0, <2.0.0, >=1.{SECRET}.0", 3),
        ("1.34.0 || 1.35.0", 1),
    ],
)
def test_a_malformed_range_names_the_comparator_never_the_text(text: str, number: int) -> None:
    with pytest.raises(ValueError, match=rf"^comparator {number} is not") as raised:
        compile_range(text)
    message = str(raised.value)
    assert SECRET not in message and "1.34" not in message and "||" not in message


def test_too_many_comparators_are_refused() -> None:
    most = ", ".join([">=1.0.0"] * MAX_COMPARATORS)
    assert compile_range(most).contains(v("1.0.0"))
    with pytest.raises(ValueError, match=f"more than {MAX_COMPARATORS} comparators"):
        compile_range(f"{most}, >={SECRET}")


@pytest.mark.parametrize(
    ("text", "version", "expected"),
    [
        (None, "v1.34.0", "yes"),
        (None, None, "yes"),  # no range: every version, known or not
        (">=1.34.0", None, "unknown"),
        (">=1.34.0", "v1.34.0", "yes"),
        (">=1.34.0", "v1.33.0", "outside"),
    ],
)
def test_version_match(text: str | None, version: str | None, expected: str) -> None:
    compiled = None if text is None else compile_range(text)
    assert version_match(compiled, None if version is None else v(version)) == expected


# --- properties, against an ordering written from the SemVer text ---------------------

PRERELEASES = [None, "alpha", "alpha.1", "alpha.beta", "beta", "beta.2", "beta.11", "rc.1", "1"]
VERSIONS = st.builds(
    Version,
    major=st.integers(0, 3),
    minor=st.integers(0, 40),
    patch=st.integers(0, 12),
    prerelease=st.sampled_from(PRERELEASES),
    build=st.sampled_from([None, "vmware.1", "k3s1", "001"]),
)


def semver_key(version: Version) -> tuple[object, ...]:
    """SemVer 2.0.0 section 11: numbers, then a release above its pre-releases, whose
    identifiers compare numerically or by text, numbers below text, a shorter list of
    equal identifiers first. Build metadata plays no part."""
    if version.prerelease is None:
        pre: tuple[object, ...] = (1,)
    else:
        ids = tuple(
            (0, int(i), "") if i.isdigit() else (1, 0, i) for i in version.prerelease.split(".")
        )
        pre = (0, ids)
    return (version.major, version.minor, version.patch, pre)


@given(VERSIONS, VERSIONS, VERSIONS)
def test_a_two_sided_range_holds_exactly_between_its_ends(
    low: Version, high: Version, version: Version
) -> None:
    compiled = compile_range(f">={low}, <{high}")
    expected = semver_key(low) <= semver_key(version) < semver_key(high)
    assert compiled.contains(version) == expected


@given(VERSIONS, VERSIONS, st.booleans())
def test_spelling_does_not_change_a_range(low: Version, version: Version, spaced: bool) -> None:
    compact = compile_range(f">={low},<{low.bump_minor()}")
    sep = "  ,\t" if spaced else ", "
    spelled = compile_range(f" >= v{low}{sep}< v{low.bump_minor()} ")
    assert compact.contains(version) == spelled.contains(version)


NEGATIONS = {">=": "<", "<": ">=", ">": "<=", "<=": ">", "==": "!=", "!=": "=="}


@given(st.sampled_from(sorted(NEGATIONS)), VERSIONS, VERSIONS)
def test_a_comparator_and_its_negation_split_every_version(
    op: str, bound: Version, version: Version
) -> None:
    held = compile_range(f"{op}{bound}").contains(version)
    assert held != compile_range(f"{NEGATIONS[op]}{bound}").contains(version)


@given(VERSIONS)
def test_a_formatted_version_parses_back_to_itself(version: Version) -> None:
    for text in (str(version), f"v{version}"):
        parsed = parse_version(text)
        assert parsed is not None and str(parsed) == str(version)
        assert semver_key(parsed) == semver_key(version)


@given(st.lists(VERSIONS, min_size=1, max_size=MAX_COMPARATORS), st.data())
def test_one_bad_comparator_is_named_by_its_position(
    bounds: list[Version], data: st.DataObject
) -> None:
    parts = [f">={b}" for b in bounds]
    position = data.draw(st.integers(0, len(parts) - 1))
    parts[position] = f"~{SECRET}"
    with pytest.raises(ValueError, match=rf"^comparator {position + 1} is not") as raised:
        compile_range(", ".join(parts))
    assert SECRET not in str(raised.value)


# --- ranges sharing a version: overlap, same_versions, and the CRS that refuses them --

V133, V134 = ">=1.33.0, <1.34.0", ">=1.34.0, <1.35.0"  # as README and docs/upgrades.md


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        (V133, V134, False),
        (">=1.33.0, <=1.34.0", V134, True),  # they touch at 1.34.0
        (">=1.33.0, <1.35.0", V134, True),
        ("<1.35.0", ">=1.35.0-0", True),  # 1.35.0-rc.1 is below 1.35.0
        ("<1.35.0-0", ">=1.35.0-0", False),
        (">=1.34.0, <1.35.0-0", ">=1.35.0-0, <1.36.0-0", False),
        (">1.0.0-0, <1.0.0-0.0", ">=0.0.0", False),  # nothing sorts between the two
        (">=1.0.0-0, <=1.0.0-0.0, !=1.0.0-0", ">=0.0.0-0", True),
        (">=1.0.0-0, <=1.0.0-0.0, !=1.0.0-0, !=1.0.0-0.0", ">=0.0.0-0", False),
        (">1.34.9", "<1.35.0-0", True),  # 1.34.10
        (">=1.34.0, !=1.34.0", "<=1.34.0", False),
        ("==1.34.2+vmware.1", V134, True),
        ("==1.34.2", "==1.34.3", False),
        ("==1.34.2", "!=1.34.2", False),
        ("<0.0.0-0", "<9.0.0", False),  # nothing sorts before 0.0.0-0
        (">=1.0.0", "<=1.0.0+build", True),
    ],
)
def test_overlap(a: str, b: str, expected: bool) -> None:
    assert overlap(compile_range(a), compile_range(b)) is expected
    assert overlap(compile_range(b), compile_range(a)) is expected


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        (V134, V134, True),
        (V134, "<1.35.0, >=v1.34.0+b", True),
        (V134, ">=1.34.0, <=1.34.999", False),  # 1.34.1000 and 1.35.0-rc.1
        (">=1.34.0, <1.35.0-0", ">1.33.999999, <1.35.0-0, !=1.34.0-0", False),
        (">1.0.0-0, <1.0.0-0.0.0", "==1.0.0-0.0", True),
        (V134, ">=1.34.0", False),
    ],
)
def test_same_versions(a: str, b: str, expected: bool) -> None:
    assert same_versions(compile_range(a), compile_range(b)) is expected
    assert same_versions(compile_range(b), compile_range(a)) is expected


def test_a_next_minor_pre_release_is_outside_an_upper_bound_at_its_pre_release() -> None:
    """docs/upgrades.md's advice: "<1.35.0-0" leaves 1.35's release candidates out."""
    assert compile_range(V134).contains(v("v1.35.0-rc.1"))  # strict SemVer, as documented
    recommended = compile_range(">=1.34.0, <1.35.0-0")
    assert not recommended.contains(v("v1.35.0-rc.1"))
    assert not recommended.contains(v("v1.35.0-alpha.0"))
    assert recommended.contains(v("v1.34.9")) and recommended.contains(v("v1.34.1000"))
    assert compile_range(">=1.35.0-0, <1.36.0-0").contains(v("v1.35.0-rc.1"))


NEAR_PRE = [None, "0", "0.0", "alpha", "alpha.0", "rc.1", "rc.1.0"]
NEAR = st.builds(
    Version,
    major=st.just(1),
    minor=st.integers(0, 2),
    patch=st.integers(0, 2),
    prerelease=st.sampled_from(NEAR_PRE),
)
COMPARATORS = st.tuples(st.sampled_from([">=", "<=", ">", "<", "==", "!=", ""]), NEAR).map(
    lambda pair: f"{pair[0]}{pair[1]}"
)
RANGES = st.lists(COMPARATORS, min_size=1, max_size=4).map(", ".join)


def following(version: Version, steps: int) -> list[Version]:
    """``version`` and the ``steps`` versions right after it, from SemVer's rules: after
    a release the next patch's least pre-release ``-0``; after a pre-release the same
    one with a ``.0`` identifier more (nothing sorts between them)."""
    out = [version]
    for _ in range(steps):
        last = out[-1]
        pre = "0" if last.prerelease is None else f"{last.prerelease}.0"
        patch = last.patch + (last.prerelease is None)
        out.append(Version(last.major, last.minor, patch, pre))
    return out


@given(RANGES, RANGES, st.lists(NEAR, max_size=5))
def test_overlap_agrees_with_brute_force(a_text: str, b_text: str, extra: list[Version]) -> None:
    """A version in both ranges among the bounds, the versions right after them and
    more drawn makes ``overlap`` true; ``overlap`` true comes with a version in both.
    Every range's least members are among the candidates, so they decide exactly."""
    a, b = compile_range(a_text), compile_range(b_text)
    bounds = [c.version for c in (*a.comparators, *b.comparators)]
    starts = [Version(0, 0, 0, "0"), *bounds, *extra]
    candidates = [x for s in starts for x in following(s, 9)]
    brute = any(a.contains(x) and b.contains(x) for x in candidates)
    found = witness(a, b)
    assert overlap(a, b) is brute is (found is not None)
    assert found is None or (a.contains(found) and b.contains(found))


@given(RANGES, RANGES, st.lists(NEAR, max_size=5))
def test_same_versions_agrees_with_brute_force(
    a_text: str, b_text: str, extra: list[Version]
) -> None:
    a, b = compile_range(a_text), compile_range(b_text)
    bounds = [c.version for c in (*a.comparators, *b.comparators)]
    starts = [Version(0, 0, 0, "0"), *bounds, *extra]
    candidates = [x for s in starts for x in following(s, 9)]
    brute = all(a.contains(x) == b.contains(x) for x in candidates)
    assert same_versions(a, b) is brute


def crs_with(*ranges: str | None) -> CRS:
    resources = [
        {"kind": "ConfigMap", "name": f"cpi-{n}"}
        if text is None
        else {"kind": "ConfigMap", "name": f"cpi-{n}", "kubernetesVersions": text}
        for n, text in enumerate(ranges)
    ]
    return parse_crs(crs("cpi", "unused", resources=resources))


@pytest.mark.parametrize(
    "ranges",
    [
        (V133, V134),  # the documented builds
        (None, V133, None, V134),
        (">=1.33.0-0, <1.34.0-0", ">=1.34.0-0, <1.35.0-0", ">=1.35.0-0, <1.36.0-0"),
        (V134, "<1.35.0, >=v1.34.0", V133),  # one build in two resources, same versions
    ],
)
def test_builds_for_versions_apart_are_accepted(ranges: tuple[str | None, ...]) -> None:
    parsed = crs_with(*ranges)
    assert parsed.problem is None and parsed.follows_versions


@pytest.mark.parametrize(
    ("ranges", "first", "second"),
    [
        ((">=1.33.0, <=1.34.0", V134), 0, 1),  # touching at 1.34.0: the builds alternated
        ((V133, None, V134, ">=1.34.5, <1.36.0"), 2, 3),
        ((V134, ">=1.33.0, <1.34.0", ">=1.30.0"), 0, 2),
        (("<1.35.0", ">=1.35.0-0, <1.36.0"), 0, 1),  # 1.35's pre-releases
    ],
)
def test_builds_sharing_a_version_are_refused_naming_both(
    ranges: tuple[str | None, ...], first: int, second: int
) -> None:
    parsed = crs_with(*ranges)
    assert isinstance(parsed.problem, InvalidSpec) and parsed.model is None
    message = str(parsed.problem)
    assert message.startswith(
        f"spec.resources[{first}].kubernetesVersions and "
        f"spec.resources[{second}].kubernetesVersions share a version"
    )
    assert "1.3" not in message  # never the ranges' text


def pairwise(texts: list[str | None]) -> tuple[int, int] | None:
    """The first clashing pair, every pair tried in turn (the later one's position
    first)."""
    ranges = [None if t is None else compile_range(t) for t in texts]
    for j, later in enumerate(ranges):
        for i, earlier in enumerate(ranges[:j]):
            if earlier is None or later is None or not overlap(earlier, later):
                continue
            if not same_versions(earlier, later):
                return i, j
    return None


@given(st.lists(st.one_of(st.none(), RANGES, st.sampled_from([V133, V134])), max_size=8))
def test_the_first_clash_agrees_with_every_pair_in_turn(texts: list[str | None]) -> None:
    ranges = [None if t is None else compile_range(t) for t in texts]
    assert first_partial_overlap(ranges) == pairwise(texts)


HOLES = ", ".join(f"!=1.0.0-a.{'0.' * n}0" for n in range(7))
HOSTILE = f">=1.0.0-a, !=1.0.0-a, {HOLES}, <2.0.0"  # ten comparators


def hostile(n: int) -> str:
    holes = ", ".join(f"!=1.{n}.0-a.{'0.' * k}0" for k in range(7))
    return f">=1.{n}.0-a, !=1.{n}.0-a, {holes}, <1.{n + 1}.0-a"


def comparisons(monkeypatch: pytest.MonkeyPatch, ranges: list[str]) -> tuple[CRS, int]:
    """The parsed CRS and how many times two versions were compared parsing it."""
    count = 0
    compare = Version.compare

    def counted(self: Version, other: object) -> int:
        nonlocal count
        count += 1
        return compare(self, other)  # type: ignore[arg-type]

    monkeypatch.setattr(Version, "compare", counted)
    return crs_with(*ranges), count


@pytest.mark.parametrize(
    ("ranges", "clash"),
    [
        ([HOSTILE] * 100, None),  # one build in a hundred resources
        ([">=1.30.0, <1.31.0"] * 100, None),
        ([hostile(n) for n in range(100)], None),  # a hundred builds apart
        ([*(hostile(n) for n in range(99)), ">=1.98.0-a.0"], (98, 99)),
        ([">=1.50.0", *(hostile(n) for n in range(99))], (0, 51)),
    ],
)
def test_a_hundred_hostile_ranges_cost_a_bounded_number_of_comparisons(
    monkeypatch: pytest.MonkeyPatch, ranges: list[str], clash: tuple[int, int] | None
) -> None:
    """Every pair's ranges tried in turn with their comparators took millions of
    comparisons here (seconds on the event loop at each change of the CRS)."""
    parsed, count = comparisons(monkeypatch, ranges)
    if clash is None:
        assert parsed.problem is None
    else:
        assert str(parsed.problem).startswith(f"spec.resources[{clash[0]}]")
        assert f"spec.resources[{clash[1]}]" in str(parsed.problem)
    assert count <= 20 * MAX_COMPARATORS * len(ranges)
