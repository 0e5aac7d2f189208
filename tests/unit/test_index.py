"""The indexes behind the reconcilers' caches (``engine.index``): which bindings hold
a CRS and which CRSs reference a source stay right when this controller cached its
own write (``Informer.put``) before the watch brought the same version; a CRS's entry
in a binding is looked up, not searched for, and is the first when named twice; the
Clusters each CRS selects, kept as Clusters and selectors change, agree with
matching them again."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crs_controller.core.spec.objects import (
    dependency_graph,
    parse_binding_object,
    parse_cluster,
    parse_crs,
)
from crs_controller.core.values.dependencies import Dependencies
from crs_controller.engine.index import Index
from crs_controller.engine.io.informer import Informer, WatchSpec

NS = "n"


def binding(version: int, *crss: str) -> dict[str, Any]:
    return {
        "metadata": {"name": "c1", "namespace": NS, "resourceVersion": str(version)},
        "spec": {"clusterName": "c1", "bindings": [{"clusterResourceSetName": n} for n in crss]},
    }


def crs(version: int, *sources: str) -> dict[str, Any]:
    return {
        "metadata": {"name": "a", "namespace": NS, "resourceVersion": str(version)},
        "spec": {
            "clusterSelector": {"matchLabels": {"x": "y"}},
            "resources": [{"kind": "ConfigMap", "name": s} for s in sources],
        },
    }


def make_index() -> tuple[Index, Informer[Any], Informer[Any], Informer[Any]]:
    client: Any = None

    def nothing(old: Any, new: Any) -> None:
        pass

    crss = Informer(client, WatchSpec("x/v1", "ClusterResourceSet"), parse_crs, nothing)
    clusters = Informer(client, WatchSpec("x/v1", "Cluster"), parse_cluster, nothing)
    bindings = Informer(client, WatchSpec("x/v1", "B"), parse_binding_object, nothing)
    return Index(crss, clusters, bindings), crss, bindings, clusters


def test_holders_follow_a_write_cached_before_its_watch_event() -> None:
    index, _, bindings, _ = make_index()
    index.update_binding(None, bindings.put(binding(1, "keep", "drop")))
    assert index.holders(NS, "drop") == ["c1"]
    # The controller writes version 2 and caches it at once ...
    written = bindings.put(binding(2, "keep"))
    # ... so when the watch delivers version 2, "old" is version 2 as well.
    index.update_binding(written, written)
    assert index.holders(NS, "drop") == []
    assert index.holders(NS, "keep") == ["c1"]
    index.update_binding(bindings.remove(NS, "c1"), None)
    assert index.holders(NS, "keep") == []


def test_references_follow_a_write_cached_before_its_watch_event() -> None:
    index, crss, _, _ = make_index()
    index.update_crs(None, crss.put(crs(1, "old")))
    assert [c.name for c in index.referencing(NS, "ConfigMap", "old")] == ["a"]
    written = crss.put(crs(2, "new"))
    index.update_crs(written, written)
    assert index.referencing(NS, "ConfigMap", "old") == []
    assert [c.name for c in index.referencing(NS, "ConfigMap", "new")] == ["a"]
    assert [c.name for c in index.crss_in(NS)] == ["a"]
    index.update_crs(crss.remove(NS, "a"), None)
    assert index.crss_in(NS) == [] and index.referencing(NS, "ConfigMap", "new") == []


def named(name: str, namespace: str, version: int = 1) -> dict[str, Any]:
    meta = {"name": name, "namespace": namespace, "resourceVersion": str(version)}
    return {"metadata": meta, "spec": {"clusterSelector": {}}}


def test_namespaces_with_objects_are_counted_once_each() -> None:
    index = make_index()[0]
    a1, a2, b1 = parse_crs(named("x", "a")), parse_crs(named("y", "a")), parse_crs(named("x", "b"))
    cluster_b = parse_cluster(named("c", "b"))
    steps: list[tuple[str, Any, Any, int]] = [
        ("crs", None, a1, 1),
        ("crs", a1, a1, 1),  # an update, or a cached write seen again
        ("crs", None, a2, 1),
        ("cluster", None, cluster_b, 2),
        ("crs", None, b1, 2),
        ("crs", b1, None, 2),  # b still has its Cluster
        ("crs", a1, None, 2),
        ("crs", a2, None, 1),  # a is empty: no longer a tenant
        ("crs", a2, None, 1),  # a deletion seen twice
        ("cluster", cluster_b, None, 0),
    ]
    for kind, old, new, count in steps:
        if kind == "crs":
            index.update_crs(old, new)
        else:
            index.update_cluster(old, new)
        assert index.namespace_count() == count, (kind, old, new)


# --- the dependsOn graph, cached per namespace ---------------------------------------


def depending(name: str, *deps: str, namespace: str = NS, version: int = 1) -> dict[str, Any]:
    raw = named(name, namespace, version)
    raw["spec"].update(
        resources=[{"kind": "ConfigMap", "name": "s"}], dependsOn=[{"name": d} for d in deps]
    )
    return raw


def fresh(index: Index, namespace: str) -> Dependencies:
    return Dependencies(dependency_graph(index.crss_in(namespace)))


@pytest.mark.parametrize(
    ("edit", "rebuilt"),
    [
        pytest.param(lambda: depending("b", "a", version=2), False, id="other-edit-kept"),
        pytest.param(lambda: depending("b", version=2), True, id="dependsOn-changed"),
        pytest.param(lambda: depending("b", "a", "c", version=2), True, id="dependsOn-grew"),
        pytest.param(lambda: depending("c"), True, id="a-crs-appears"),
        pytest.param(lambda: depending("a", namespace="other"), False, id="other-namespace"),
    ],
)
def test_the_graph_is_built_again_only_when_a_namespace_s_dependencies_change(
    edit: Callable[[], dict[str, Any]], rebuilt: bool
) -> None:
    index, crss, _, _ = make_index()
    for raw in (depending("a"), depending("b", "a")):
        index.update_crs(None, crss.put(raw))
    before = index.dependencies(NS)
    assert before.graph == {"a": (), "b": ("a",)}
    new = edit()
    meta = new["metadata"]
    index.update_crs(crss.get(meta["namespace"], meta["name"]), crss.put(new))
    after = index.dependencies(NS)
    assert (after is not before) == rebuilt
    assert after.graph == fresh(index, NS).graph
    assert index.dependencies(NS) is after  # kept until the next change


NAMES = ["a", "b", "c", "d"]
crs_updates = st.lists(
    st.tuples(
        st.sampled_from(NAMES),
        st.none() | st.lists(st.sampled_from([*NAMES, "gone"]), max_size=3),  # None: deleted
    ),
    max_size=30,
)


@settings(max_examples=200, deadline=None)
@given(crs_updates)
def test_the_cached_graph_is_always_a_fresh_one(
    updates: list[tuple[str, list[str] | None]],
) -> None:
    index, crss, _, _ = make_index()
    for version, (name, deps) in enumerate(updates, start=1):
        old = crss.get(NS, name)
        if deps is None:
            if old is not None:
                index.update_crs(crss.remove(NS, name), None)
        else:
            index.update_crs(old, crss.put(depending(name, *deps, version=version)))
        cached, built = index.dependencies(NS), fresh(index, NS)
        assert all(c.model is not None for c in index.crss_in(NS))
        assert cached.graph == built.graph
        assert cached.cycles() == built.cycles()
        assert cached.dependency_order(NAMES) == built.dependency_order(NAMES)


class PagedList:
    """A LIST of three pages; ``asked`` counts the pages asked for so far."""

    def __init__(self) -> None:
        self.asked = 0

    async def pages(self, *args: Any, **kwargs: Any) -> Any:
        for n in range(3):
            self.asked += 1
            yield [named(f"cm-{n}", NS, version=2)], ("9" if n == 2 else "")


async def test_a_relist_parses_each_page_before_asking_for_the_next() -> None:
    client = PagedList()
    seen: list[tuple[str | None, str | None, int]] = []

    def name(parsed: Any) -> str | None:
        return None if parsed is None else str(parsed.meta.name)

    def handler(old: Any, new: Any) -> None:
        seen.append((name(old), name(new), client.asked))

    informer = Informer(client, WatchSpec("v1", "ConfigMap"), parse_crs, handler)  # type: ignore[arg-type]
    informer.put(named("gone", NS))  # cached before, no longer listed
    informer.put(named("cm-0", NS, version=2))  # cached at the listed version already
    assert await informer._relist() == "9"
    assert seen == [(None, "cm-1", 2), (None, "cm-2", 3), ("gone", None, 3)]
    assert informer.get(NS, "gone") is None and informer.get(NS, "cm-2") is not None


# --- a CRS's entry in a binding, looked up ---------------------------------------------


class Counted(list[Any]):
    """A binding's entry list counting the entries walked."""

    visits = 0

    def __iter__(self) -> Any:
        for item in super().__iter__():
            Counted.visits += 1
            yield item


def test_an_entry_lookup_walks_no_entry_list() -> None:
    index, _, bindings, _ = make_index()
    names = [f"set-{n}" for n in range(1000)]
    cached = bindings.put(binding(1, *names))
    spec = cached.valid.spec
    spec.bindings = Counted(spec.bindings)
    Counted.visits = 0
    # A CRS pass looks its entry up once per cluster: not a walk of the entries each.
    found = [index.entry(NS, "c1", name) for name in names]
    assert [e.cluster_resource_set_name for e in found if e is not None] == names
    assert Counted.visits <= len(names)  # the map built once, for the version cached
    index.entry(NS, "c1", "set-999")
    assert Counted.visits <= len(names)


def test_a_crs_named_twice_in_a_binding_reads_its_first_entry() -> None:
    index, _, bindings, _ = make_index()
    raw = binding(1, "a", "b", "a")
    raw["spec"]["bindings"][0]["outcome"] = {"reason": "Applied"}
    raw["spec"]["bindings"][2]["outcome"] = {"reason": "ApplyFailed"}
    index.update_binding(None, bindings.put(raw))
    entry = index.entry(NS, "c1", "a")
    assert entry is not None and entry.outcome is not None
    assert entry.outcome.reason == "Applied"
    assert index.entry(NS, "c1", "missing") is None


# --- which Clusters each CRS selects, kept as they change ----------------------------

LABELS = st.sampled_from([{}, {"env": "prod"}, {"env": "dev"}, {"env": "prod", "tier": "a"}])
SELECTORS = st.sampled_from(
    [{"matchLabels": {"env": "prod"}}, {"matchLabels": {"env": "dev"}}, {"matchLabels": {}}]
)
# (kind, name, labels or selector, gone): a Cluster or CRS written, or deleted.
STEPS = st.lists(
    st.one_of(
        st.tuples(st.just("cluster"), st.sampled_from("pqr"), LABELS, st.booleans()),
        st.tuples(st.just("crs"), st.sampled_from("ab"), SELECTORS, st.booleans()),
    ),
    max_size=30,
)


def selecting(name: str, selector: dict[str, Any], version: int) -> dict[str, Any]:
    raw = named(name, NS, version)
    raw["spec"].update(clusterSelector=selector, resources=[{"kind": "ConfigMap", "name": "s"}])
    return raw


def labelled(name: str, labels: dict[str, str], version: int) -> dict[str, Any]:
    raw = named(name, NS, version)
    raw["metadata"]["labels"] = labels
    return raw


@settings(max_examples=200, deadline=None)
@given(STEPS)
def test_each_crs_selection_agrees_with_matching_the_clusters_again(
    steps: list[tuple[str, str, dict[str, Any], bool]],
) -> None:
    index, crss, _, clusters = make_index()
    for version, (kind, name, value, gone) in enumerate(steps, start=1):
        if kind == "crs":
            old = crss.get(NS, name)
            new = None if gone else crss.put(selecting(name, value, version))
            if gone:
                crss.remove(NS, name)
            if old is not None or new is not None:
                index.update_crs(old, new)
        else:
            held = clusters.get(NS, name)
            before = {c.name: held is not None and c.selects(held) for c in index.crss_in(NS)}
            new = None if gone else clusters.put(labelled(name, value, version))
            if gone:
                clusters.remove(NS, name)
            if held is None and new is None:
                continue
            told = index.update_cluster(held, new)
            now = {c.name: new is not None and c.selects(new) for c in index.crss_in(NS)}
            moved = {n: (before[n], now[n]) for n in now if before[n] or now[n]}
            assert told == moved
        for each in index.crss_in(NS):
            assert index.selects_any(NS, each.name) == bool(index.matching_clusters(each))
