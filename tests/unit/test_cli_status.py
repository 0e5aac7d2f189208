"""``status``'s REVISION and CURRENT of a cluster, decided as the controller decides
them (the engine's ``entry_revision`` with the sources' hashes now): a resource that
follows the Kubernetes version and that a cluster does not have is on its source's
hash, so the other version's build never keeps a cluster off the revision; which
resources those are; and which sources' hashes are read (none missing, refused or
forbidden, the last with a warning). A tenant's large objects do not stop the
command for every namespace: each kind is read page by page, each page bounded on
its own."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

import pytest

from crs_controller.app.commands.status import (
    BINDING_KIND,
    CRS_KIND,
    FleetState,
    _crs,
    _Fold,
    _hashes,
    _row,
    _version_following,
    table_rows,
)
from crs_controller.app.dashboard import view
from crs_controller.core.api.models import API_VERSION, CRSBinding, KeptObject, ResourceRef
from crs_controller.core.errors import APIError
from crs_controller.core.manifests.hashing import resource_hash
from crs_controller.core.spec.metadata import MAX_LABELS
from crs_controller.core.spec.objects import (
    CRS,
    Binding,
    Cluster,
    parse_binding_object,
    parse_crs,
)
from crs_controller.core.text import safe
from crs_controller.engine.reconcile.rollout import revision_of

from .memory_kube import MemoryKube

V133, V134 = ">=1.33.0, <1.34.0", ">=1.34.0, <1.35.0"
NOW = {
    ("ConfigMap", "common"): "xxh3:000000000000c0de",
    ("ConfigMap", "cpi-1-33"): "xxh3:0000000000001330",
    ("Secret", "cpi-1-34"): "xxh3:0000000000001340",
}
TARGET = revision_of(NOW)  # the CRS's status.revision
OLD = "xxh3:00000000000000ff"


def the_crs(*ranges: str | None) -> CRS:
    """common, cpi-1-33 and cpi-1-34 with these kubernetesVersions (default: 1.33's
    and 1.34's on the CPI builds)."""
    ranges = ranges or (None, V133, V134)
    resources: list[dict[str, Any]] = []
    for (kind, name), versions in zip(NOW, ranges, strict=True):
        ref = {"kind": kind, "name": name}
        resources.append(ref if versions is None else {**ref, "kubernetesVersions": versions})
    spec = {"clusterSelector": {"matchLabels": {"cpi": "vsphere"}}, "resources": resources}
    meta = {"name": "cpi", "namespace": "fleet"}
    raw = {"apiVersion": API_VERSION, "kind": "ClusterResourceSet", "metadata": meta}
    return parse_crs({**raw, "spec": spec, "status": {"revision": TARGET}})


def binding(recorded: dict[str, str]) -> Any:
    """The cluster's binding: each resource named in ``recorded`` applied at its hash."""
    kinds = {name: kind for kind, name in NOW}
    resources = [
        {"kind": kinds[name], "name": name, "hash": digest, "applied": True}
        for name, digest in recorded.items()
    ]
    entry = {"clusterResourceSetName": "cpi", "resources": resources}
    spec = {"clusterName": "c", "bindings": [entry]}
    meta = {"name": "c", "namespace": "fleet"}
    kind = "ClusterResourceSetBinding"
    return parse_binding_object(
        {"apiVersion": API_VERSION, "kind": kind, "metadata": meta, "spec": spec}
    )


def entry_of(recorded: dict[str, str]) -> CRSBinding:
    """The binding's entry for the CRS ``cpi`` (see ``binding``)."""
    found: CRSBinding = binding(recorded).entries()["cpi"]
    return found


COMMON, CPI33, CPI34 = (NOW[key] for key in NOW)
ON_133 = {"common": COMMON, "cpi-1-33": CPI33}
ON_134 = {"common": COMMON, "cpi-1-34": CPI34}


@pytest.mark.parametrize(
    ("recorded", "now", "current"),
    [(ON_133, NOW, True),                                    # 1.34's build is not its own
     (ON_134, NOW, True),
     ({"common": COMMON}, NOW, True),                        # version unknown: waits
     ({**ON_133, "cpi-1-33": OLD}, NOW, False),              # its own build is older
     ({**ON_134, "common": OLD}, NOW, False),
     ({**ON_133, "cpi-1-33": CPI33 + "+xxh3:00000000000000aa"}, NOW, True),  # substituted
     (ON_133, None, False),                                  # no hashes: none taken
     (ON_133, {k: v for k, v in NOW.items() if k[1] != "cpi-1-34"}, False),  # unread
     ({**ON_133, "cpi-1-34": CPI34}, NOW, True)],            # both, e.g. after an upgrade
)  # fmt: skip
def test_a_cluster_is_current_as_the_controller_counts_it(
    recorded: dict[str, str], now: dict[tuple[str, str], str] | None, current: bool
) -> None:
    row = _row(the_crs(), "c", entry_of(recorded), now)
    assert (row["revision"] == TARGET) is current


def test_a_resource_for_every_version_is_never_taken_from_now() -> None:
    """Only the resources that follow the version: one every cluster should have and
    does not keeps it off the revision, as in the controller."""
    row = _row(the_crs(None, None, V134), "c", entry_of(ON_134), NOW)
    assert row["revision"] != TARGET


def test_the_table_says_current_for_each_cluster() -> None:
    crs = the_crs()
    bindings = {
        ("fleet", "on-1-33"): binding(ON_133),
        ("fleet", "on-1-34"): binding({**ON_134, "common": OLD}),
    }
    record = _crs(crs, [], bindings, NOW)
    rows = dict(table_rows([record], wide=False))
    assert rows[("fleet/cpi", "on-1-33")][4] == "true"
    assert rows[("fleet/cpi", "on-1-34")][4] == "false"
    # No binding yet: no revision, so CURRENT says nothing.
    assert _row(crs, "new", None, NOW) == {
        "cluster": "new",
        "state": "Pending",
        "reason": "Pending",
        "applied": False,
    }


def test_objects_kept_on_a_cluster_are_shown_with_it_as_text() -> None:
    """The binding's ``deletionsSkipped``: in the row (JSON, YAML) and the wide
    MESSAGE, a name a tenant wrote made safe."""
    kept = binding(ON_133)
    entry = kept.model.spec.bindings[0]
    crd = {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition"}
    hostile = "x.example.com\x1b[2J\u202e"
    entry.deletions_skipped = [KeptObject(**crd, name=hostile)]  # type: ignore[arg-type]
    record = _crs(the_crs(), [], {("fleet", "c"): kept}, NOW)
    (row,) = record["clusters"]
    assert row["deletionsSkipped"] == [{**crd, "name": safe(hostile, 1000)}]
    assert "\x1b" not in row["deletionsSkipped"][0]["name"]
    message = dict(table_rows([record], wide=True))[("fleet/cpi", "c")][-1]
    assert message.endswith(f"kept (not deleted): CustomResourceDefinition/{safe(hostile, 1000)}")
    # Nothing kept: the message is the outcome's alone.
    assert _row(the_crs(), "c", entry_of(ON_133), NOW)["deletionsSkipped"] == []


@pytest.mark.parametrize(
    ("ranges", "following"),
    [((None, V133, V134), ["cpi-1-33", "cpi-1-34"]),
     ((None, None, None), []),
     ((V133, None, None), ["common"])],
)  # fmt: skip
def test_the_resources_that_follow_the_version(
    ranges: tuple[str | None, ...], following: list[str]
) -> None:
    assert [ref.name for ref in _version_following(the_crs(*ranges))] == following


def test_a_spec_the_model_refuses_follows_nothing() -> None:
    meta = {"name": "bad", "namespace": "fleet"}
    raw = {"apiVersion": API_VERSION, "kind": "ClusterResourceSet", "metadata": meta}
    crs = parse_crs({**raw, "spec": {"mode": 3}})
    assert crs.model is None
    assert _version_following(crs) == []


class Sources:
    """A management cluster's answers to GET, by source name: an object, None (not
    found) or an error."""

    def __init__(self, answers: dict[str, Any]) -> None:
        self.answers = answers

    async def get(self, api_version: str, kind: str, name: str, namespace: str) -> Any:
        answer = self.answers[name]
        if isinstance(answer, Exception):
            raise answer
        return answer


def source(kind: str, **extra: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": kind, "metadata": {"name": "s"}, **extra}


CONFIGMAP = source("ConfigMap", data={"a.yaml": "kind: Namespace"})
SECRET = source("Secret", type="addons.cluster.x-k8s.io/resource-set", data={"a": "YQ=="})
WRONG_TYPE = source("Secret", type="Opaque", data={"a": "YQ=="})
REFS = [ResourceRef(kind="ConfigMap", name="cm"), ResourceRef(kind="Secret", name="sec")]


@pytest.mark.parametrize(
    ("answers", "hashed", "warned"),
    [({"cm": CONFIGMAP, "sec": SECRET}, ["cm", "sec"], False),
     ({"cm": None, "sec": SECRET}, ["sec"], False),               # missing
     ({"cm": CONFIGMAP, "sec": WRONG_TYPE}, ["cm"], False),       # refused: its status says
     ({"cm": CONFIGMAP, "sec": APIError("forbidden", status=403)}, ["cm"], True)],
)  # fmt: skip
def test_the_sources_hashed_as_the_controller_hashes_them(
    capsys: pytest.CaptureFixture[str], answers: dict[str, Any], hashed: list[str], warned: bool
) -> None:
    hashes = asyncio.run(_hashes(Sources(answers), "fleet", REFS))  # type: ignore[arg-type]
    assert [name for _, name in hashes] == hashed
    for (_, name), digest in hashes.items():
        assert digest == resource_hash(answers[name])
    err = capsys.readouterr().err
    assert (err == "crs-controller status: warning: cannot read Secret fleet/sec "
            "(forbidden): CURRENT may be false for it\n") if warned else err == ""  # fmt: skip


def test_other_api_errors_end_the_command() -> None:
    answers = {"cm": APIError("boom", status=500), "sec": SECRET}
    with pytest.raises(APIError):
        asyncio.run(_hashes(Sources(answers), "fleet", REFS))  # type: ignore[arg-type]


def tenants(count: int, own: int, others: int) -> FleetState:
    """``count`` tenants, each with a CRS ``addons`` in its own namespace, ``own``
    Clusters there (the first one not selected) and a binding on each, plus one left
    behind for a Cluster gone; and ``others`` Clusters of the operator's, bound to a
    CRS ``addons`` of their own namespace."""
    apis = {CRS_KIND: API_VERSION, BINDING_KIND: API_VERSION, "Cluster": "cluster.x-k8s.io/v1beta1"}
    state = FleetState(None, apis)
    state.objects = {kind: {} for kind in apis}
    spec = {"clusterSelector": {"matchLabels": {"on": "yes"}}, "resources": [REFS[0].model_dump()]}
    for i in range(count):
        meta = {"name": "addons", "namespace": f"tenant-{i}"}
        raw = {"apiVersion": API_VERSION, "kind": CRS_KIND, "metadata": meta, "spec": spec}
        state.objects[CRS_KIND][(f"tenant-{i}", "addons")] = raw
        for c in range(own):
            add_cluster(state, f"tenant-{i}", f"c{c}", selected=c > 0)
        add_binding(state, f"tenant-{i}", "gone")
    for c in range(others):
        add_cluster(state, "fleet", f"f{c}", selected=True)
    return state


def add_cluster(state: FleetState, namespace: str, name: str, *, selected: bool) -> None:
    meta = {"name": name, "namespace": namespace, "labels": {"on": "yes" if selected else "no"}}
    raw = {"apiVersion": state.apis["Cluster"], "kind": "Cluster", "metadata": meta}
    state.objects["Cluster"][(namespace, name)] = raw
    add_binding(state, namespace, name)


def add_binding(state: FleetState, namespace: str, cluster: str) -> None:
    entry = {"clusterResourceSetName": "addons", "outcome": {"reason": "Applied"}}
    meta = {"name": cluster, "namespace": namespace}
    spec = {"clusterName": cluster, "bindings": [entry]}
    raw = {"apiVersion": API_VERSION, "kind": BINDING_KIND, "metadata": meta, "spec": spec}
    state.objects[BINDING_KIND][(namespace, cluster)] = raw


def test_the_fleet_is_folded_with_each_crs_matched_in_its_own_namespace(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Many tenants' CRSs over an operator's fleet: each CRS is matched against the
    Clusters of its namespace only, so the fold follows the cells, not CRSs times
    Clusters; the records are those of each CRS folded alone over everything."""
    state = tenants(count=40, own=3, others=200)
    crss = state.crss(None)
    clusters, bindings = state.clusters(), state.each(BINDING_KIND, parse_binding_object)
    alone = [_crs(crs, list(clusters.values()), bindings) for crs in crss]
    asked: list[tuple[str, str]] = []
    selects = CRS.selects

    def counted(crs: CRS, cluster: Cluster) -> bool:
        asked.append((crs.namespace, cluster.namespace))
        return selects(crs, cluster)

    monkeypatch.setattr(CRS, "selects", counted)
    folded = state.document(None)["clusterResourceSets"]
    in_own = sum(1 for crs in crss for c in clusters.values() if c.namespace == crs.namespace)
    assert len(asked) <= in_own
    assert folded == alone
    assert [r["cluster"] for r in folded[0]["clusters"]] == ["c0", "c1", "c2", "gone"]


def test_each_binding_is_read_once_per_fold_however_many_crss_select_its_cluster(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Many CRSs over the same clusters: each binding's entries are built once per
    fold, not once for each CRS's row on its cluster, so the fold follows the cells,
    not CRSs squared times clusters."""
    state = tenants(count=0, own=0, others=20)
    spec = {"clusterSelector": {"matchLabels": {"on": "yes"}}, "resources": [REFS[0].model_dump()]}
    names = [f"addons-{r:02}" for r in range(50)]
    for name in names:
        meta = {"name": name, "namespace": "fleet"}
        raw = {"apiVersion": API_VERSION, "kind": CRS_KIND, "metadata": meta, "spec": spec}
        state.objects[CRS_KIND][("fleet", name)] = raw
    for raw in state.objects[BINDING_KIND].values():
        outcome = {"reason": "Applied"}
        entries = [
            {"clusterResourceSetName": n, "outcome": {**outcome, "message": n}} for n in names
        ]
        raw["spec"]["bindings"] = entries
    bindings = state.each(BINDING_KIND, parse_binding_object)
    built: list[str] = []
    build = Binding.entries

    def counted(binding: Binding) -> dict[str, CRSBinding]:
        built.append(binding.meta.name)
        return build(binding)

    monkeypatch.setattr(Binding, "entries", counted)
    fold = _Fold(state.clusters().values(), bindings)
    records = [fold.record(crs, None) for crs in state.crss(None)]
    assert len(built) <= len(bindings)
    assert [r["name"] for r in records] == names
    for record in records:
        assert [row["cluster"] for row in record["clusters"]] == sorted(f"f{c}" for c in range(20))
        assert {row["message"] for row in record["clusters"]} == {record["name"]}


async def test_a_tenants_large_sets_do_not_stop_the_status_of_every_namespace() -> None:
    # Each large set is under what one answer may decode to, the three together over
    # it, as a list() of every namespace holding them all at once would be.
    kube = MemoryKube("management")
    note = {"kubectl.kubernetes.io/last-applied-configuration": "," * 600}
    for namespace, name, notes in [
        ("fleet", "cni", {}),
        *(("team-b", f"large-{n}", note) for n in range(3)),
    ]:
        meta = {"name": name, "namespace": namespace, "annotations": notes}
        await kube.create({"apiVersion": API_VERSION, "kind": CRS_KIND, "metadata": meta})
    kube.values = 1_000
    state = await FleetState.load(kube, None)  # type: ignore[arg-type]
    assert sorted(state.objects[CRS_KIND]) == [
        ("fleet", "cni"),
        *(("team-b", f"large-{n}") for n in range(3)),
    ]
    assert state.versions[CRS_KIND] == str(kube._version)
    names = [r["name"] for r in state.document(None)["clusterResourceSets"]]
    assert names == ["cni", "large-0", "large-1", "large-2"]


def test_a_refused_cluster_is_marked_in_its_rows_and_cells() -> None:
    """A Cluster the controller refuses (its labels over the bound) keeps the row of
    its binding's entry, marked: the controller leaves it alone, so the outcome is
    the last recorded. The wide MESSAGE and the dashboard's cell say so, naming the
    field, never a label."""
    state = tenants(count=1, own=2, others=0)
    raw = state.objects["Cluster"][("tenant-0", "c1")]
    raw["metadata"]["labels"] = {f"k{n}": "s3cr3t" for n in range(MAX_LABELS + 1)}
    (record,) = state.document(None)["clusterResourceSets"]
    rows = {row["cluster"]: row for row in record["clusters"]}
    refusal = f"metadata.labels: more than {MAX_LABELS} entries"
    assert rows["c1"]["refused"] == refusal and rows["c1"]["reason"] == "Applied"
    assert "refused" not in rows["c0"] and "refused" not in rows["gone"]
    message = dict(table_rows([record], wide=True))[("tenant-0/addons", "c1")][-1]
    assert message.startswith(f"Cluster refused: {refusal}; left alone")
    cell = view.build(state, datetime(2026, 1, 1, tzinfo=UTC))["cells"]["tenant-0/addons/c1"]
    assert cell["refused"] == refusal and cell["message"].startswith("Cluster refused: ")
    assert "s3cr3t" not in repr(record) + repr(cell)
