"""``spec.dependsOn`` decisions (``core.values.dependencies``): whether a CRS may apply on one
cluster (chains, diamonds, self-dependency, 2- and 3-cycles, a CRS depending on a cycle
or on a blocked CRS, missing dependencies, dependencies that do not select the cluster,
dependencies whose spec the controller refuses),
the cycles named, apply and removal order, the outcome reason and message, and
properties on random graphs checked against brute-force reachability."""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from collections.abc import Set as AbstractSet

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crs_controller.core.values.dependencies import (
    Cycle,
    Dependencies,
    Gate,
    Go,
    Missing,
    Wait,
    cycles,
    dependency_order,
    describe,
    gate,
    removal_order,
)

Graph = dict[str, list[str]]

CHAIN: Graph = {"cni": [], "csi": ["cni"], "apps": ["csi"]}
DIAMOND: Graph = {"base": [], "cni": ["base"], "csi": ["base"], "apps": ["cni", "csi"]}
TWO_CYCLE: Graph = {"a": ["b"], "b": ["a"], "app": ["a"]}
THREE_CYCLE: Graph = {"c": ["a"], "a": ["b"], "b": ["c"]}
EVERYTHING = frozenset("abcdefgh") | frozenset(CHAIN) | frozenset(DIAMOND) | {"app"}


def decide(
    crs: str,
    graph: Graph,
    done: AbstractSet[str],
    selecting: AbstractSet[str] = EVERYTHING,
    refused: AbstractSet[str] = frozenset(),
) -> Gate:
    return gate(crs, graph, selecting.__contains__, done.__contains__, refused.__contains__)


@pytest.mark.parametrize(
    ("crs", "graph", "done", "selecting", "expected"),
    [
        pytest.param("cni", CHAIN, set(), EVERYTHING, Go(), id="chain-root-goes"),
        pytest.param("csi", CHAIN, set(), EVERYTHING, Wait("cni"), id="chain-csi-waits-for-cni"),
        pytest.param("csi", CHAIN, {"cni"}, EVERYTHING, Go(), id="chain-csi-after-cni"),
        pytest.param("apps", CHAIN, {"cni"}, EVERYTHING, Wait("csi"), id="chain-apps-waits"),
        # csi counts as done on paper, but it is itself waiting for cni.
        pytest.param("apps", CHAIN, {"csi"}, EVERYTHING, Wait("csi"), id="chain-blocked-middle"),
        pytest.param("apps", CHAIN, {"cni", "csi"}, EVERYTHING, Go(), id="chain-all-done"),
        pytest.param("apps", DIAMOND, set(), EVERYTHING, Wait("cni"), id="diamond-first-in-spec"),
        pytest.param(
            "apps",
            {**DIAMOND, "apps": ["csi", "cni"]},
            set(),
            EVERYTHING,
            Wait("csi"),
            id="diamond-spec-order-decides",
        ),
        pytest.param(
            "apps", DIAMOND, {"base", "cni"}, EVERYTHING, Wait("csi"), id="diamond-one-side-done"
        ),
        pytest.param(
            "apps", DIAMOND, {"cni", "csi"}, EVERYTHING, Wait("cni"), id="diamond-base-not-done"
        ),
        pytest.param(
            "apps", DIAMOND, {"base", "cni", "csi"}, EVERYTHING, Go(), id="diamond-all-done"
        ),
        pytest.param("a", {"a": ["a"]}, {"a"}, EVERYTHING, Cycle(("a",)), id="self-dependency"),
        pytest.param("a", TWO_CYCLE, set(), EVERYTHING, Cycle(("a", "b")), id="2-cycle-a"),
        pytest.param("b", TWO_CYCLE, {"a"}, EVERYTHING, Cycle(("a", "b")), id="2-cycle-b"),
        pytest.param(
            "b", THREE_CYCLE, set(), EVERYTHING, Cycle(("a", "b", "c")), id="3-cycle-from-smallest"
        ),
        pytest.param(
            "b",
            {"a": ["c"], "c": ["b"], "b": ["a"]},
            set(),
            EVERYTHING,
            Cycle(("a", "c", "b")),
            id="3-cycle-direction-kept",
        ),
        pytest.param("app", TWO_CYCLE, {"a"}, EVERYTHING, Wait("a"), id="depends-on-a-cycle"),
        pytest.param(
            "a", {"a": ["a", "ghost"]}, set(), EVERYTHING, Cycle(("a",)), id="cycle-before-missing"
        ),
        pytest.param(
            "app",
            {"app": ["cni", "ghost"], "cni": []},
            set(),
            EVERYTHING,
            Missing("ghost"),
            id="missing-before-waiting",
        ),
        pytest.param(
            "app",
            {"app": ["ghost-2", "ghost-1"]},
            set(),
            EVERYTHING,
            Missing("ghost-2"),
            id="first-missing-in-spec-order",
        ),
        pytest.param(
            "app",
            {"app": ["cni"], "cni": ["ghost"]},
            {"cni"},
            EVERYTHING,
            Wait("cni"),
            id="depends-on-a-crs-missing-a-dependency",
        ),
        pytest.param(
            "apps", DIAMOND, set(), {"csi"}, Wait("csi"), id="non-selecting-dependency-skipped"
        ),
        pytest.param("apps", DIAMOND, set(), set(), Go(), id="no-dependency-selects"),
        pytest.param(
            "apps",
            DIAMOND,
            {"cni", "csi"},
            {"cni", "csi"},
            Go(),
            id="unselected-base-not-waited-for-by-dependencies",
        ),
        pytest.param(
            "app", TWO_CYCLE, set(), {"app"}, Go(), id="non-selecting-cycle-not-waited-for"
        ),
        pytest.param(
            "app", {"app": ["ghost"]}, set(), set(), Missing("ghost"), id="missing-never-selects"
        ),
        pytest.param(
            "app",
            {"app": ["cni", "cni"], "cni": []},
            set(),
            EVERYTHING,
            Wait("cni"),
            id="duplicate-dependency",
        ),
    ],
)
def test_gate(
    crs: str, graph: Graph, done: set[str], selecting: AbstractSet[str], expected: Gate
) -> None:
    assert decide(crs, graph, done, selecting) == expected


@pytest.mark.parametrize(
    ("crs", "graph", "done", "selecting", "expected"),
    [
        pytest.param("csi", CHAIN, set(), set(), Wait("cni", invalid=True), id="not-selecting"),
        pytest.param("csi", CHAIN, {"cni"}, EVERYTHING, Wait("cni", invalid=True), id="done"),
        pytest.param("apps", CHAIN, {"cni", "csi"}, EVERYTHING, Wait("csi"), id="transitively"),
        pytest.param(
            "apps", DIAMOND, {"base", "csi"}, EVERYTHING, Wait("cni", invalid=True), id="first"
        ),
        # cni was on a cycle with app; refused, it depends on nothing it could say.
        pytest.param(
            "app",
            {"app": ["cni"], "cni": []},
            set(),
            EVERYTHING,
            Wait("cni", invalid=True),
            id="member-of-a-cycle",
        ),
        pytest.param("cni", CHAIN, set(), EVERYTHING, Go(), id="itself-not-gated-here"),
    ],
)
def test_a_refused_dependency_is_always_waited_for(
    crs: str, graph: Graph, done: set[str], selecting: AbstractSet[str], expected: Gate
) -> None:
    """A CRS whose spec the controller refuses (``cni`` here) is never done and selects
    clusters nobody can tell: whatever the other answers, its dependents wait."""
    assert decide(crs, graph, done, selecting, refused={"cni"}) == expected


@pytest.mark.parametrize(
    ("graph", "expected"),
    [
        pytest.param(CHAIN, {}, id="chain"),
        pytest.param(DIAMOND, {}, id="diamond"),
        pytest.param({"a": ["a"], "b": ["a"]}, {"a": ("a",)}, id="self-dependency"),
        pytest.param(TWO_CYCLE, {"a": ("a", "b"), "b": ("a", "b")}, id="2-cycle-not-dependent"),
        pytest.param(
            THREE_CYCLE,
            {name: ("a", "b", "c") for name in "abc"},
            id="3-cycle",
        ),
        pytest.param(
            {"a": ["b"], "b": ["a", "c"], "c": ["b"]},
            {"a": ("a", "b"), "b": ("a", "b"), "c": ("b", "c")},
            id="figure-eight-each-names-its-own",
        ),
        pytest.param(
            {"a": ["b", "d"], "b": ["c"], "c": ["a"], "d": ["a"]},
            {"a": ("a", "d"), "b": ("a", "b", "c"), "c": ("a", "b", "c"), "d": ("a", "d")},
            id="shortest-cycle-through-each",
        ),
        pytest.param({"a": ["ghost"], "b": ["ghost"]}, {}, id="missing-is-no-cycle"),
    ],
)
def test_cycles(graph: Graph, expected: dict[str, tuple[str, ...]]) -> None:
    assert cycles(graph) == expected


@pytest.mark.parametrize(
    ("names", "graph", "expected"),
    [
        pytest.param(["apps", "csi", "cni"], CHAIN, ["cni", "csi", "apps"], id="chain"),
        pytest.param(
            ["apps", "csi", "cni", "base"], DIAMOND, ["base", "cni", "csi", "apps"], id="diamond"
        ),
        pytest.param(["c", "a", "b"], {}, ["a", "b", "c"], id="ties-by-name"),
        pytest.param(
            ["a", "z", "b"], {"a": ["z"], "z": [], "b": []}, ["b", "z", "a"], id="smallest-first"
        ),
        pytest.param(
            ["a", "c"], {"a": ["b"], "b": ["c"], "c": []}, ["c", "a"], id="through-others"
        ),
        pytest.param(["app", "b", "a"], TWO_CYCLE, ["a", "b", "app"], id="cycle-in-name-order"),
        pytest.param(
            ["x", "y", "base"],
            {"x": ["y"], "y": ["x", "base"], "base": []},
            ["base", "x", "y"],
            id="cycle-after-its-dependency",
        ),
        pytest.param(["a", "gone"], {"a": ["gone"]}, ["gone", "a"], id="gone-crs-still-needed"),
        pytest.param(["apps", "apps", "cni"], CHAIN, ["cni", "apps"], id="duplicates"),
        pytest.param([], CHAIN, [], id="empty"),
    ],
)
def test_apply_and_removal_order(names: list[str], graph: Graph, expected: list[str]) -> None:
    assert dependency_order(names, graph) == expected
    assert removal_order(names, graph) == expected[::-1]


@pytest.mark.parametrize(
    ("decided", "expected"),
    [
        pytest.param(Go(), ("", ""), id="go"),
        pytest.param(
            Wait("cni"), ("DependencyNotReady", "waiting for ClusterResourceSet cni"), id="wait"
        ),
        pytest.param(
            Wait("cni", invalid=True),
            ("DependencyNotReady", "waiting for ClusterResourceSet cni: its spec is invalid"),
            id="wait-for-invalid",
        ),
        pytest.param(
            Missing("cni"),
            ("DependencyNotFound", "ClusterResourceSet cni does not exist"),
            id="not-found",
        ),
        pytest.param(
            Cycle(("a", "b")), ("DependencyCycle", "dependency cycle: a -> b -> a"), id="cycle"
        ),
        pytest.param(Cycle(("a",)), ("DependencyCycle", "dependency cycle: a -> a"), id="self"),
    ],
)
def test_describe(decided: Gate, expected: tuple[str, str]) -> None:
    assert describe(decided) == expected


def test_long_chains_do_not_recurse() -> None:
    names = [f"crs-{i:05d}" for i in range(3000)]
    graph = {name: names[i + 1 : i + 2] for i, name in enumerate(names)}
    assert cycles(graph) == {}
    assert gate(names[0], graph, lambda _: True, lambda _: True) == Go()
    assert gate(names[0], graph, lambda _: True, lambda name: name != names[-1]) == Wait(names[1])


# Random graphs: a few existing CRSs, dependencies drawn from them and two that do not exist.
NODES = list("abcdefg")
MISSING = ["x", "y"]
graphs = st.dictionaries(
    st.sampled_from(NODES), st.lists(st.sampled_from(NODES + MISSING), max_size=4)
)
# Acyclic ones too (each CRS depends only on later letters), where waiting is most of the story.
dags = st.fixed_dictionaries(
    {
        name: st.lists(st.sampled_from(NODES[i + 1 :] or MISSING), max_size=3)
        for i, name in enumerate(NODES)
    }
)
FUZZ = settings(max_examples=300, deadline=None)


def closure(graph: Mapping[str, Sequence[str]]) -> dict[str, set[str]]:
    """Brute force: every existing CRS reachable from each one by at least one link."""
    reach = {name: {d for d in deps if d in graph} for name, deps in graph.items()}
    changed = True
    while changed:
        changed = False
        for name, linked in reach.items():
            grown = linked.union(*(reach[d] for d in linked))
            changed |= grown != linked
            reach[name] = grown
    return reach


def shortest_cycle_length(graph: Mapping[str, Sequence[str]], start: str) -> int:
    distance = {start: 0}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        for linked in graph.get(node, ()):
            if linked == start:
                return distance[node] + 1
            if linked in graph and linked not in distance:
                distance[linked] = distance[node] + 1
                queue.append(linked)
    raise AssertionError(f"{start} is on no cycle")


def reference_gate(
    crs: str,
    graph: Mapping[str, Sequence[str]],
    selects: Callable[[str], bool],
    done: Callable[[str], bool],
) -> Gate:
    """The rules as written, recursively: a dependency is done only if it may go itself."""
    if crs in closure(graph)[crs]:
        return Cycle(cycles(graph)[crs])
    for dependency in graph[crs]:
        if dependency not in graph:
            return Missing(dependency)
    for dependency in graph[crs]:
        if selects(dependency) and not (
            done(dependency) and reference_gate(dependency, graph, selects, done) == Go()
        ):
            return Wait(dependency)
    return Go()


@FUZZ
@given(graphs)
def test_cycles_are_exactly_the_nodes_on_cycles(graph: Graph) -> None:
    reach = closure(graph)
    found = cycles(graph)
    assert set(found) == {name for name in graph if name in reach[name]}
    for name, members in found.items():
        assert name in members
        assert members[0] == min(members)
        assert len(set(members)) == len(members)
        assert len(members) == shortest_cycle_length(graph, name)
        for here, there in zip(members, (*members[1:], members[0]), strict=True):
            assert there in graph[here], f"{here} -> {there} is not a dependency"


@FUZZ
@given(graphs, st.sets(st.sampled_from(NODES + MISSING)))
def test_apply_order_puts_dependencies_first(graph: Graph, names: set[str]) -> None:
    reach = closure(graph)
    ordered = dependency_order(names, graph)
    assert sorted(ordered) == sorted(names)
    position = {name: i for i, name in enumerate(ordered)}
    for name in ordered:
        for other in reach.get(name, set()) & names:
            if name in reach[other]:  # one cycle: name order among themselves
                assert (position[name] < position[other]) == (name < other)
            else:
                assert position[other] < position[name], f"{name} needs {other} first"
    assert removal_order(names, graph) == ordered[::-1]


@FUZZ
@given(graphs, st.sets(st.sampled_from(NODES + MISSING)), st.randoms(use_true_random=False))
def test_results_do_not_depend_on_input_order(
    graph: Graph, names: set[str], rnd: random.Random
) -> None:
    keys = list(graph)
    rnd.shuffle(keys)
    reordered = {name: graph[name] for name in keys}
    shuffled = {name: rnd.sample(deps, len(deps)) for name, deps in reordered.items()}
    listed = list(names)
    rnd.shuffle(listed)
    assert list(cycles(shuffled)) == list(cycles(graph))
    assert cycles(shuffled) == cycles(graph)
    assert dependency_order(listed, shuffled) == dependency_order(sorted(names), graph)
    for crs in graph:
        assert decide(crs, reordered, names) == decide(crs, graph, names)


@FUZZ
@given(graphs | dags, st.sets(st.sampled_from(NODES)), st.sets(st.sampled_from(NODES)))
def test_gate_follows_the_rules(graph: Graph, selecting: set[str], done: set[str]) -> None:
    for crs in graph:
        expected = reference_gate(crs, graph, selecting.__contains__, done.__contains__)
        assert decide(crs, graph, done, selecting) == expected


# --- built once per change: ``Dependencies`` ------------------------------------------


def reference_apply_order(names: set[str], graph: Graph) -> list[str]:
    """Brute force: repeatedly the smallest name whose needs (reachable, outside its own
    cycle, a gone CRS counting as a CRS that needs nothing) are all placed."""
    known = {name: [] for name in names} | graph
    reach = closure(known)
    left, ordered = set(names), []
    while left:
        free = [n for n in left if all(d in ordered or n in reach[d] for d in reach[n] & left)]
        ordered.append(min(free))
        left.remove(ordered[-1])
    return ordered


@FUZZ
@given(graphs | dags, st.sets(st.sampled_from(NODES + MISSING)))
def test_apply_order_is_the_smallest_valid_order(graph: Graph, names: set[str]) -> None:
    assert Dependencies(graph).dependency_order(names) == reference_apply_order(names, graph)


@FUZZ
@given(graphs | dags, st.sets(st.sampled_from(NODES)), st.sets(st.sampled_from(NODES)))
def test_gates_of_one_cluster_follow_the_rules_in_any_order(
    graph: Graph, selecting: set[str], done: set[str]
) -> None:
    """One ``gates`` per cluster keeps what it worked out; asked in apply order (as the
    cluster reconcile does) or in reverse, every answer is the rules' answer."""
    built = Dependencies(graph)
    for names in (built.dependency_order(graph), built.dependency_order(graph)[::-1]):
        decide = built.gates(selecting.__contains__, done.__contains__)
        for crs in names:
            expected = reference_gate(crs, graph, selecting.__contains__, done.__contains__)
            assert decide(crs) == expected


def tangle(size: int, links: int, wrap: bool) -> Graph:
    names = [f"crs-{i:04d}" for i in range(size)]
    if wrap:  # one strongly connected component: every CRS on a cycle
        return {
            n: [names[(i + k) % size] for k in range(1, links + 1)] for i, n in enumerate(names)
        }
    return {n: names[i + 1 : i + 1 + links] for i, n in enumerate(names)}


@pytest.mark.parametrize("wrap", [False, True], ids=["chain-of-10", "one-big-cycle"])
def test_800_crss_each_depending_on_the_next_10_decide_alike_every_way(wrap: bool) -> None:
    """The graph built once per change decides every CRS's gate as a graph built for
    that one decision would, again and again (how long each takes: the figures of
    hack/bench/dependencies.py)."""
    graph = tangle(800, 10, wrap)
    built = Dependencies(graph)
    first_use = built.gates(lambda _: True, lambda _: True)
    order = built.dependency_order(graph)
    first = [first_use(name) for name in order]  # names every cycle once
    decide = built.gates(lambda _: True, lambda _: True)
    again = [decide(name) for name in built.dependency_order(graph)]
    sample = [gate(name, graph, lambda _: True, lambda _: True) for name in order[:20]]
    assert again == first
    assert sample == first[:20]
    assert all(isinstance(g, Cycle if wrap else Go) for g in first)
