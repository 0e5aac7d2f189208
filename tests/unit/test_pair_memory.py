"""What the process remembers per CRS on a cluster (outcomes, drift check times)
forgets a deleted Cluster or CRS by looking at that Cluster's or that CRS's own pairs
only, however many the namespace holds; and the table's files by cluster and by CRS
always say what the table holds."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from crs_controller.core.api.models import PairKey
from crs_controller.core.state.status import Outcome
from crs_controller.engine.memory.drift import DriftSchedule
from crs_controller.engine.memory.outcomes import Outcomes
from crs_controller.engine.memory.pairs import PairTable

from .counted_names import Name, names

CRSS = 20
CLUSTERS = 1000  # 20,000 pairs in one namespace
APPLIED = Outcome("Applied", "Applied", "all resources applied", 1)


def full_namespace() -> tuple[Name, list[Name], list[Name]]:
    return Name("tenant"), names("crs", CRSS), names("cluster", CLUSTERS)


def test_forgetting_a_cluster_looks_at_its_own_outcomes_only() -> None:
    namespace, crss, clusters = full_namespace()
    outcomes = Outcomes()
    for crs in crss:
        for cluster in clusters:
            outcomes.record(namespace, crs, cluster, APPLIED)
    Name.compared = 0
    outcomes.drop_cluster(Name("tenant"), Name("cluster7"))
    assert Name.compared <= 8 * CRSS  # a scan would compare 20,000 names
    assert outcomes.get("tenant", "crs3", "cluster7") is None
    assert outcomes.get("tenant", "crs3", "cluster8") == APPLIED
    assert len(outcomes) == CRSS * (CLUSTERS - 1)


def test_forgetting_a_crs_looks_at_its_own_outcomes_only() -> None:
    namespace, crss, clusters = full_namespace()
    outcomes = Outcomes()
    for crs in crss:
        for cluster in clusters:
            outcomes.record(namespace, crs, cluster, APPLIED)
    Name.compared = 0
    outcomes.drop_crs(Name("tenant"), Name("crs3"))
    assert Name.compared <= 8 * CLUSTERS  # a scan would compare 20,000 names
    assert outcomes.get("tenant", "crs3", "cluster7") is None
    assert outcomes.get("tenant", "crs4", "cluster7") == APPLIED
    assert len(outcomes) == (CRSS - 1) * CLUSTERS


def test_forgetting_a_cluster_looks_at_its_own_drift_checks_only() -> None:
    namespace, crss, clusters = full_namespace()
    schedule = DriftSchedule()
    for crs in crss:
        for cluster in clusters:
            schedule.checked((namespace, crs, cluster), 100.0)
    Name.compared = 0
    schedule.forget_cluster(Name("tenant"), Name("cluster7"))
    assert Name.compared <= 8 * CRSS  # a scan would compare 20,000 names
    assert schedule.wait(("tenant", "crs3", "cluster7"), 130.0, 60.0) == 0.0
    assert schedule.wait(("tenant", "crs3", "cluster8"), 130.0, 60.0) == 30.0
    assert len(schedule) == CRSS * (CLUSTERS - 1)


# --- the table's files stay in step with what it holds ----------------------------------

few = st.sampled_from(["a", "b", "c"])
changes = st.lists(
    st.one_of(
        st.tuples(st.just("put"), few, few, few, st.integers(0, 3)),
        st.tuples(st.just("pop"), few, few, few),
        st.tuples(st.just("drop_cluster"), few, few),
        st.tuples(st.just("drop_crs"), few, few),
    ),
    max_size=60,
)


def apply_to_model(model: dict[PairKey, int], change: tuple[object, ...]) -> None:
    match change:
        case ("put", str(ns), str(crs), str(cluster), int(value)):
            model[(ns, crs, cluster)] = value
        case ("pop", str(ns), str(crs), str(cluster)):
            model.pop((ns, crs, cluster), None)
        case ("drop_cluster", str(ns), str(cluster)):
            for key in [k for k in model if (k[0], k[2]) == (ns, cluster)]:
                del model[key]
        case ("drop_crs", str(ns), str(crs)):
            for key in [k for k in model if k[:2] == (ns, crs)]:
                del model[key]


def apply_to_table(table: PairTable[int], change: tuple[object, ...]) -> None:
    match change:
        case ("put", str(ns), str(crs), str(cluster), int(value)):
            table.put((ns, crs, cluster), value)
        case ("pop", str(ns), str(crs), str(cluster)):
            table.pop((ns, crs, cluster))
        case ("drop_cluster", str(ns), str(cluster)):
            table.drop_cluster(ns, cluster)
        case ("drop_crs", str(ns), str(crs)):
            table.drop_crs(ns, crs)


def filed(model: dict[PairKey, int], by: int, name: int) -> dict[tuple[str, str], set[str]]:
    files: dict[tuple[str, str], set[str]] = {}
    for key in model:
        files.setdefault((key[0], key[by]), set()).add(key[name])
    return files


@settings(max_examples=200)
@given(changes)
def test_the_files_by_cluster_and_by_crs_say_what_the_table_holds(
    sequence: list[tuple[object, ...]],
) -> None:
    """Under any puts and drops: every pair is filed under its cluster and its CRS,
    nothing else is filed, and no empty file is left behind."""
    table: PairTable[int] = PairTable()
    model: dict[PairKey, int] = {}
    for change in sequence:
        apply_to_model(model, change)
        apply_to_table(table, change)
        assert table._values == model
        assert table._by_cluster == filed(model, by=2, name=1)
        assert table._by_crs == filed(model, by=1, name=2)
        assert len(table) == len(model)
        assert all(table.get(key) == value for key, value in model.items())
