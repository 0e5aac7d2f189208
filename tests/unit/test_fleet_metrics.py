"""Per-CRS gauges stay bounded however many CRSs tenants make: at most ``total`` label
pairs of their own (``per_namespace`` per namespace) plus one ``_other`` pair, and the
series summed over every CRS still tell the whole fleet; a CRS shows at most five
revisions, however many its bindings are on. Also: which state each cluster outcome
counts in, and what counts as drift corrected again."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import REGISTRY, CollectorRegistry, Gauge

from crs_controller.core.api.models import CRSBinding
from crs_controller.core.state.fleet import CLUSTER_STATES
from crs_controller.engine.io import fleet_metrics
from crs_controller.engine.io.fleet_metrics import (
    CLUSTERS_BY_REVISION,
    OTHER,
    PER_NAMESPACE,
    REPEAT_WINDOW,
    TOTAL,
    WAITING_REASONS,
    RepeatWatch,
    SeriesSlots,
    SlottedGauge,
    bounded_revisions,
    drift_corrected,
    fleet_counts,
    forget_crs,
    show_rollout,
)

from .counted_names import Name, names


def entry(reason: str | None) -> CRSBinding | None:
    if reason is None:
        return None
    return CRSBinding.model_validate({"clusterResourceSetName": "c", "outcome": {"reason": reason}})


def test_the_bound_is_what_the_docs_say() -> None:
    assert (TOTAL, PER_NAMESPACE) == (200, 20)


def test_clusters_count_by_the_state_status_shows_and_waiting_by_reason() -> None:
    """The states are core/state/fleet's (tests/unit/test_dashboard.py has the table):
    each cluster counts once; a Waiting one also under what holds it."""
    clusters = [
        (entry(None), None),
        (entry("Applied"), True),
        (entry("Applied"), False),  # applied on an older revision
        (entry("Progressing"), False),  # held by its rollout step
        (entry("DependencyNotReady"), None),
        (entry("DependencyNotReady"), None),
        (entry("ClusterUnreachable"), None),
        (entry("ApplyFailed"), None),
    ]
    states, waiting = fleet_counts(clusters)
    assert states == Counter(Pending=1, Ready=1, Progressing=1, Waiting=3, Unreachable=1, Failed=1)
    assert waiting == Counter(DependencyNotReady=2, Progressing=1)
    assert set(states) <= set(CLUSTER_STATES)
    assert set(waiting) <= set(WAITING_REASONS)


def test_slots_first_come_per_namespace_then_other() -> None:
    slots = SeriesSlots(total=4, per_namespace=2)
    assert [slots.of("a", n) for n in ("x", "y", "z", "w")] == [
        ("a", "x"),
        ("a", "y"),
        ("a", OTHER),
        ("a", OTHER),
    ]
    assert slots.of("b", "x") == ("b", "x")  # the fourth pair
    assert slots.of("c", "x") == (OTHER, OTHER)  # no room left
    assert slots.of("a", "x") == ("a", "x")  # a CRS keeps its place
    assert slots.release("b", "x") == ("b", "x")
    assert slots.of("c", "y") == ("c", "y")  # a freed place is taken again
    assert slots.release("nope", "x") is None


crs_names = st.lists(
    st.tuples(st.sampled_from("abcdefg"), st.integers(0, 60).map(str)), max_size=300
)


@settings(max_examples=60, deadline=None)
@given(crs_names, st.lists(st.integers(0, 299), max_size=100))
def test_series_stay_bounded_and_sums_stay_whole(
    crss: list[tuple[str, str]], deleted: list[int]
) -> None:
    registry = CollectorRegistry()
    gauge = Gauge("g", "", ["namespace", "crs", "state"], registry=registry)
    slots = SeriesSlots(total=12, per_namespace=3)
    slotted = SlottedGauge(gauge, ("applied", "failed"))
    alive: dict[tuple[str, str], int] = {}
    for i, key in enumerate(crss):
        alive[key] = i % 5 + 1
        slotted.show(slots.of(*key), key, {"applied": alive[key], "failed": 1})
    for index in deleted:
        if index < len(crss) and crss[index] in alive:
            key = crss[index]
            del alive[key]
            labels = slots.release(*key)
            assert labels is not None
            slotted.forget(labels, key)
            if not slots.holds(labels):
                slotted.drop(labels)
    samples = [s for m in registry.collect() for s in m.samples]
    pairs = {(s.labels["namespace"], s.labels["crs"]) for s in samples}
    assert len(pairs) <= 12 + 1
    for namespace in "abcdefg":
        own = {p for p in pairs if p[0] == namespace and p[1] != OTHER}
        assert len(own) <= 3
    applied = sum(s.value for s in samples if s.labels["state"] == "applied")
    assert applied == sum(alive.values())
    assert sum(s.value for s in samples if s.labels["state"] == "failed") == len(alive)


def test_a_gone_crs_leaves_no_series() -> None:
    registry = CollectorRegistry()
    gauge = Gauge("g", "", ["namespace", "crs", "reason"], registry=registry)
    slots = SeriesSlots()
    slotted = SlottedGauge(gauge)
    key = ("ns", "addons")
    slotted.show(slots.of(*key), key, {"DependencyNotReady": 2})
    slotted.show(slots.of(*key), key, {"WaitingForVersion": 1})  # the other reason went
    assert [s.labels["reason"] for m in registry.collect() for s in m.samples] == [
        "WaitingForVersion"
    ]
    labels = slots.release(*key)
    assert labels is not None
    slotted.forget(labels, key)
    slotted.drop(labels)
    assert [s for m in registry.collect() for s in m.samples] == []


def revision_samples(namespace: str, name: str) -> dict[str, float]:
    return {
        s.labels["revision"]: s.value
        for m in CLUSTERS_BY_REVISION.collect()
        for s in m.samples
        if (s.labels["namespace"], s.labels["crs"]) == (namespace, name)
    }


def test_clusters_on_many_revisions_show_a_bounded_number_of_series() -> None:
    """Each cluster's revision comes from its binding: 100 clusters on 100 revisions
    (edits during a slow rollout, or bindings written by hand) still make at most
    five series of the CRS, and they still sum to every cluster. Only revisions the
    controller computed are named: a binding may say anything."""
    on = Counter({f"rev{i:03}": 1 for i in range(100)})
    on.update({"rev050": 4, "rev042": 9, "none": 3, "written by hand": 20})
    known = ["rev042", "rev050", "rev060"]  # the history's
    show_rollout("many-revisions", "cni", on, "Progressing", ("rev007", "rev003"), known)
    shown = revision_samples("many-revisions", "cni")
    assert shown == {
        "rev007": 1,  # the target
        "rev003": 1,  # the revision a rollback replaces
        "rev042": 10,  # most of the others are on it: the one the rollout moves from
        "none": 3,
        OTHER: 97 + 4 + 20,  # the 97 other revisions, rev050 with 5, and the unknown one
    }
    assert sum(shown.values()) == sum(on.values())
    # The next plan: a series no revision shows any more goes.
    show_rollout(
        "many-revisions", "cni", Counter(rev007=90, rev006=3), "Progressing", ["rev007"], ["rev006"]
    )
    assert revision_samples("many-revisions", "cni") == {"rev007": 90, "rev006": 3}
    forget_crs("many-revisions", "cni")
    assert revision_samples("many-revisions", "cni") == {}


@settings(max_examples=60, deadline=None)
@given(
    st.dictionaries(st.text("abcdef0123", min_size=1, max_size=3) | st.just("none"),
                    st.integers(0, 5), max_size=60),
    st.lists(st.text("abcdef0123", min_size=1, max_size=3) | st.none(), max_size=2),
    st.booleans(),
)  # fmt: skip
def test_revisions_shown_stay_few_and_sum_whole(
    on: dict[str, int], named: list[str | None], own: bool
) -> None:
    shown = bounded_revisions(on, named, own)
    assert sum(shown.values()) == sum(on.values())
    assert len(shown) <= (5 if own else 2)
    assert set(shown) <= {*on, OTHER}
    if own:  # what is named is shown as it is
        assert all(shown.get(r, 0) == on[r] for r in named if r in on)
    else:  # under a _other pair, no CRS's revision is shown
        assert set(shown) <= {"none", OTHER}


def test_a_repeat_is_a_correction_within_the_window_on_the_same_pair() -> None:
    watch = RepeatWatch(window=3600.0)
    first, other = ("ns", "addons", "c1"), ("ns", "addons", "c2")
    assert watch.corrected(first, 0.0) is False
    assert watch.corrected(other, 10.0) is False
    assert watch.corrected(first, 3000.0) is True
    assert watch.corrected(first, 6500.0) is True  # 3500 s after the previous one
    assert len(watch) == 1  # the pair corrected at 10.0 has left the window
    assert watch.corrected(first, 10101.0) is False  # 3601 s after


def test_forgetting_a_crs_looks_at_its_own_corrections_only() -> None:
    """Every tenant's corrections of the last hour are watched in one place; a CRS
    deleted looks only at its own clusters' entries, and the others still expire."""
    watch = RepeatWatch(window=3600.0)
    tenants, crss, clusters = names("t", 50), names("crs", 10), names("c", 40)
    for tenant in tenants:  # 20,000 entries, 40 of them for t7/crs3
        for crs in crss:
            for cluster in clusters:
                watch.corrected((tenant, crs, cluster), 100.0)
    Name.compared = 0
    watch.forget(Name("t7"), Name("crs3"))
    assert Name.compared <= 8 * len(clusters)  # a scan would compare 20,000 names
    assert len(watch) == 20_000 - len(clusters)
    assert watch.corrected(("t7", "crs3", "c1"), 200.0) is False  # forgotten
    assert watch.corrected(("t7", "crs4", "c1"), 200.0) is True  # kept
    assert watch.corrected(("t8", "crs3", "c1"), 3700.0) is False  # expired at 3700
    assert len(watch) == 3  # t7/crs3/c1, t7/crs4/c1 at 200, t8/crs3/c1 at 3700
    watch.forget("t7", "crs4")
    watch.forget("t9", "crs1")  # its entries expired: nothing is left to forget
    assert watch.corrected(("t7", "crs3", "c1"), 3799.0) is True
    assert watch.corrected(("t7", "crs4", "c1"), 3799.0) is False
    watch.corrected(("t0", "crs0", "c0"), 9000.0)  # all the others expire
    assert len(watch) == 1
    assert set(watch._clusters) == {("t0", "crs0")}  # nor are they filed by CRS


@settings(max_examples=200)
@given(
    st.lists(
        st.one_of(
            st.tuples(st.sampled_from("ab"), st.sampled_from("xy"), st.sampled_from("12")),
            st.tuples(st.sampled_from("ab"), st.sampled_from("xy")),
        ),
        max_size=40,
    ),
)
def test_the_repeat_watch_files_each_entry_under_its_crs(
    changes: list[tuple[str, str, str] | tuple[str, str]],
) -> None:
    """Corrections a window apart or closer, and CRSs forgotten, in any order: the
    entries filed by CRS are always exactly those watched."""
    watch = RepeatWatch(window=3.0)
    for now, change in enumerate(changes):
        if len(change) == 3:
            watch.corrected(change, float(now))
        else:
            watch.forget(*change)
        filed: dict[tuple[str, str], set[str]] = {}
        for namespace, name, cluster in watch._last:
            filed.setdefault((namespace, name), set()).add(cluster)
        assert watch._clusters == filed


def test_corrections_count_and_a_second_within_the_window_counts_as_repeated(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The process's own counters, through ``drift_corrected`` (what a pass calls
    when it corrected drift): every correction counts, the second on the same
    cluster within the window is a repeat, one on another cluster or after the
    window is not. The times here are the test's own, so the pairs corrected are
    watched apart from those other tests noted at the process's monotonic times."""
    monkeypatch.setattr(fleet_metrics, "_REPEATS", RepeatWatch())
    labels = {"namespace": "drift-repeats", "crs": "addons"}

    def counted() -> tuple[float, float]:
        total = REGISTRY.get_sample_value("crs_drift_corrections_total", labels)
        repeated = REGISTRY.get_sample_value("crs_drift_corrections_repeated_total", labels)
        return total or 0.0, repeated or 0.0

    try:
        drift_corrected("drift-repeats", "addons", "c1", 100.0)
        assert counted() == (1, 0)
        drift_corrected("drift-repeats", "addons", "c2", 200.0)  # another cluster
        assert counted() == (2, 0)
        drift_corrected("drift-repeats", "addons", "c1", 100.0 + REPEAT_WINDOW - 1)
        assert counted() == (3, 1)
        drift_corrected("drift-repeats", "addons", "c2", 200.0 + REPEAT_WINDOW + 1)
        assert counted() == (4, 1)  # its previous one has left the window
    finally:
        forget_crs("drift-repeats", "addons")
    assert counted() == (0, 0)  # the CRS's series went with it


def phase_samples(namespace: str, name: str) -> dict[str, float]:
    return {
        s.labels["phase"]: s.value
        for m in fleet_metrics.ROLLOUT_PHASE.collect()
        for s in m.samples
        if (s.labels["namespace"], s.labels["crs"]) == (namespace, name)
    }


def test_a_rollout_cleared_leaves_no_series_and_none_is_made_for_a_crs_without_one() -> None:
    fleet_metrics.clear_rollout("rollout-cleared", "never")  # never shown: nothing made
    assert phase_samples("rollout-cleared", "never") == {}
    show_rollout("rollout-cleared", "cni", Counter(rev1=2), "Halted", ["rev1"])
    assert phase_samples("rollout-cleared", "cni")["Halted"] == 1
    fleet_metrics.clear_rollout("rollout-cleared", "cni")
    assert phase_samples("rollout-cleared", "cni") == {}
    assert revision_samples("rollout-cleared", "cni") == {}
    forget_crs("rollout-cleared", "cni")


def test_the_repeat_counter_exists_at_0_before_its_first_repeat(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A replica that writes no status (no ``show_fleet``) corrects drift: the repeat
    counter is there at 0 after the first correction, so the first repeat is an
    increase of 1 over it."""
    monkeypatch.setattr(fleet_metrics, "_REPEATS", RepeatWatch())
    labels = {"namespace": "drift-follower", "crs": "addons"}

    def repeated() -> float | None:
        return REGISTRY.get_sample_value("crs_drift_corrections_repeated_total", labels)

    try:
        assert repeated() is None
        drift_corrected("drift-follower", "addons", "c1", 100.0)
        assert repeated() == 0
        drift_corrected("drift-follower", "addons", "c1", 200.0)
        assert repeated() == 1
        forget_crs("drift-follower", "addons")  # deleted, and made again
        drift_corrected("drift-follower", "addons", "c1", 300.0)
        assert repeated() == 0  # no repeat of the CRS that was deleted
    finally:
        forget_crs("drift-follower", "addons")
