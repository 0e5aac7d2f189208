"""What the caches keep of the metadata tenants write (``core.spec.metadata``): a
CRS's labels and the annotations the controller does not read are not kept; a
Cluster's labels over the bound are not kept and the Cluster is refused, selected by
no selector (an empty one, a negative one included) and left alone until it is
deleted, then cleaned up; a binding's are refused, its annotations up to the API
server's own bound kept whole; a Cluster of one's own over MAX_KEPT_BYTES is kept as
its summary. Each such object holds a bounded amount of memory, where 15,000 labels
held 3.1 MiB before."""

from __future__ import annotations

import copy
import json
import tracemalloc
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from structlog.testing import capture_logs

from crs_controller.core.api.clusters import HOLD_UPDATES_ANNOTATION, PAUSED_ANNOTATION
from crs_controller.core.api.models import API_VERSION, CLUSTER_UID_ANNOTATION
from crs_controller.core.errors import InvalidSpec
from crs_controller.core.rollout.history import ROLLBACK_ANNOTATION
from crs_controller.core.rollout.plan import APPROVE_ANNOTATION
from crs_controller.core.spec.metadata import (
    MAX_ANNOTATION_BYTES,
    MAX_LABEL_CHARACTERS,
    MAX_LABELS,
    labels_problem,
)
from crs_controller.core.spec.objects import (
    MAX_KEPT_BYTES,
    parse_binding_object,
    parse_binding_summary,
    parse_cluster,
    parse_cluster_kept,
    parse_cluster_summary,
    parse_crs,
)
from crs_controller.engine.io.parsed_crss import ParsedCRSs
from crs_controller.engine.reconcile.context import Settings
from crs_controller.engine.reconcile.hook import HOOK_RETRY_SECONDS, NOTHING_TO_DO, hook_status
from crs_controller.engine.reconcile.result import NOTHING
from crs_controller.engine.runtime.controller import Controller

from .builders import NS, Obj, cluster, configmap_source, crs, payload, reconcile, world_with
from .memory_kube import CLUSTER_API, MemoryKube

# As measured of the objects a tenant could write before: 15,557 labels, 1.4 MiB.
HUGE = {f"example.com/k{n:05}": "v" * 63 for n in range(15_557)}
SECRET = "s3cr3t-value"


def labels(count: int, key_chars: int = 8, value_chars: int = 8) -> dict[str, str]:
    return {f"{n:0{key_chars}}": "v" * value_chars for n in range(count)}


@pytest.mark.parametrize(
    ("found", "refused"),
    [
        ({}, False),
        (labels(MAX_LABELS), False),
        (labels(MAX_LABELS + 1, key_chars=3, value_chars=0), True),
        # 64 labels of 253 + 63 characters, some 20 KiB: a real label's longest.
        (labels(64, key_chars=253, value_chars=63), False),
        (labels(2, key_chars=MAX_LABEL_CHARACTERS // 2, value_chars=0), False),
        (labels(2, key_chars=MAX_LABEL_CHARACTERS // 2, value_chars=1), True),
        (HUGE, True),
        ("not a mapping", False),  # the model says what is wrong with it
    ],
)
def test_the_bound_on_labels(found: Any, refused: bool) -> None:
    problem = labels_problem(found, "metadata.labels")
    assert (problem is not None) is refused
    if problem is not None:
        assert problem.startswith("metadata.labels: more than ")


def test_a_refusal_names_the_field_never_a_key_or_value() -> None:
    found = {f"{SECRET}-{n}": SECRET for n in range(MAX_LABELS + 1)}
    problem = labels_problem(found, "metadata.labels")
    assert problem == f"metadata.labels: more than {MAX_LABELS} entries"


def huge_cluster(name: str = "c1", found: dict[str, str] = HUGE) -> Obj:
    raw = cluster(name)
    raw["metadata"]["labels"] = {**found, "env": "prod"}
    return raw


def selecting(selector: dict[str, Any]) -> Any:
    return parse_crs(crs("a", "src", clusterSelector=selector))


SELECTORS = [
    {"matchLabels": {"env": "prod"}},
    {"matchExpressions": [{"key": "env", "operator": "Exists"}]},
    {"matchExpressions": [{"key": "missing", "operator": "DoesNotExist"}]},
    {"matchExpressions": [{"key": "env", "operator": "NotIn", "values": ["dev"]}]},
    {"matchExpressions": [{"key": "missing", "operator": "NotIn", "values": ["x"]}]},
    {},
]


@pytest.mark.parametrize("parse", [parse_cluster, parse_cluster_summary, parse_cluster_kept])
@pytest.mark.parametrize("selector", SELECTORS)
def test_a_cluster_over_the_bound_is_selected_by_no_selector(
    parse: Callable[[Obj], Any], selector: dict[str, Any]
) -> None:
    refused = parse(huge_cluster())
    assert refused.problem == f"metadata.labels: more than {MAX_LABELS} entries"
    assert refused.meta.labels == {}
    assert not selecting(selector).selects(refused)


@pytest.mark.parametrize("selector", SELECTORS[:5])
def test_a_cluster_at_the_bound_is_selected_as_its_labels_say(selector: dict[str, Any]) -> None:
    within = parse_cluster(huge_cluster(found=labels(MAX_LABELS - 1)))
    assert within.problem is None
    assert len(within.meta.labels) == MAX_LABELS
    assert selecting(selector).selects(within)


@given(st.integers(min_value=0, max_value=3 * MAX_LABELS))
def test_a_cluster_is_refused_exactly_past_the_bound(count: int) -> None:
    parsed = parse_cluster_summary(huge_cluster(found=labels(count, key_chars=4, value_chars=0)))
    assert (parsed.problem is not None) is (count + 1 > MAX_LABELS)
    assert selecting({"matchLabels": {"env": "prod"}}).selects(parsed) is (parsed.problem is None)


def held_bytes(parse: Callable[[Obj], Any], raw: Obj) -> int:
    """What ``parse`` keeps in memory of ``raw`` as a watch brings it (decoded from
    JSON, the rest freed), as tracemalloc counts it."""
    text = json.dumps(raw)
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        kept = parse(json.loads(text))
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    del kept
    return held


def test_a_crs_keeps_only_the_metadata_it_is_read_for() -> None:
    raw = crs("a", "src")
    read = {PAUSED_ANNOTATION: "", APPROVE_ANNOTATION: "r1/2", ROLLBACK_ANNOTATION: "r0"}
    raw["metadata"]["labels"] = dict(HUGE)
    raw["metadata"]["annotations"] = {**HUGE, **read, "other": "x" * 200_000}
    raw["metadata"]["uid"], raw["metadata"]["resourceVersion"] = "u1", "7"
    parsed = parse_crs(raw)
    assert parsed.model is not None
    for meta in (parsed.meta, parsed.model.metadata):
        assert meta.labels == {}
        assert meta.annotations == read
        assert (meta.name, meta.uid, meta.resource_version, meta.generation) == ("a", "u1", "7", 1)
    assert parsed.paused and parsed.approved("r1") == 2
    assert held_bytes(parse_crs, raw) < 64 * 1024  # 3.5 MiB before


@pytest.mark.parametrize("parse", [parse_cluster_summary, parse_cluster_kept])
def test_a_cluster_with_labels_over_the_bound_holds_little(parse: Callable[[Obj], Any]) -> None:
    raw = huge_cluster()
    raw["metadata"]["annotations"] = {HOLD_UPDATES_ANNOTATION: "true", "other": "x" * 200_000}
    assert held_bytes(parse, raw) < 16 * 1024  # 3.1 and 3.5 MiB before


def test_a_cluster_at_the_bound_holds_a_bounded_amount() -> None:
    longest = labels(MAX_LABELS - 1, key_chars=MAX_LABEL_CHARACTERS // MAX_LABELS - 9)
    raw = huge_cluster(found=longest)
    assert parse_cluster_summary(raw).problem is None
    assert held_bytes(parse_cluster_summary, raw) < 96 * 1024


def test_a_cluster_too_large_to_keep_whole_is_kept_as_its_summary() -> None:
    """What a variable can read of it past MAX_KEPT_BYTES: the owner keeps its
    summary, and a pass reads it whole (``parse_cluster``)."""
    small = parse_cluster_kept(cluster("c1"))
    assert small.whole and small.raw["metadata"]["labels"] == {"env": "prod"}
    bulks: list[Obj] = [{"blob": "x" * MAX_KEPT_BYTES}, {"many": [{} for _ in range(10_000)]}]
    for bulk in bulks:
        raw = cluster("c1", topology={"variables": [{"name": "v", "value": bulk}]})
        kept = parse_cluster_kept(raw)
        assert not kept.whole and kept.raw == {}
        assert kept.problem is None and selecting({"matchLabels": {"env": "prod"}}).selects(kept)
        assert parse_cluster(raw).whole and parse_cluster(raw).raw["spec"] == raw["spec"]


def binding_with(meta: Obj) -> Obj:
    base: Obj = {"name": "c1", "namespace": NS, "resourceVersion": "3", "uid": "b1"}
    return {
        "apiVersion": "addons.crs.dev/v1",
        "kind": "ClusterResourceSetBinding",
        "metadata": {**base, **meta},
        "spec": {"clusterName": "c1", "bindings": []},
    }


@pytest.mark.parametrize("field", ["labels", "annotations"])
def test_a_binding_with_metadata_over_the_bound_is_refused_and_held_small(field: str) -> None:
    owner = {"apiVersion": CLUSTER_API, "kind": "Cluster", "name": "c1", "uid": "u1"}
    extra = {CLUSTER_UID_ANNOTATION: "u1"} if field == "annotations" else {}
    raw = binding_with({field: {**HUGE, **extra}, "ownerReferences": [owner]})
    if field == "labels":
        raw["metadata"]["annotations"] = {CLUSTER_UID_ANNOTATION: "u1", "other": "x"}
    parsed = parse_binding_object(raw)
    assert parsed.model is None and parsed.problem is not None
    assert str(parsed.problem) == (
        f"binding {NS}/c1: metadata.{field}: more than {MAX_LABELS} entries"
    )
    assert parsed.meta.labels == {}
    assert parsed.meta.annotations == {CLUSTER_UID_ANNOTATION: "u1"}
    assert (parsed.meta.owner_references, parsed.meta.resource_version) == ([owner], "3")
    assert parse_binding_summary(raw).problem is not None
    assert held_bytes(parse_binding_object, raw) < 16 * 1024


def test_a_binding_within_the_bound_is_kept_whole() -> None:
    parsed = parse_binding_object(binding_with({"labels": labels(MAX_LABELS)}))
    assert parsed.model is not None and len(parsed.meta.labels) == MAX_LABELS


async def test_a_refused_cluster_is_left_alone() -> None:
    world = await world_with(crs("a", "src"))
    raw = await world.mgmt.get(CLUSTER_API, "Cluster", "c1", NS)
    assert raw is not None
    raw["metadata"]["labels"] = {**HUGE, "env": "prod"}
    await world.update(raw)
    workload = world.ctx.workloads.clients["c1"]  # type: ignore[attr-defined]
    with capture_logs() as logs:
        result = await reconcile(world)
    # Said once as it came (by the controller, below), not at every pass.
    assert (result, logs) == (NOTHING, [])
    assert workload.requests == []
    assert world.ctx.outcomes.get(NS, "a", "c1") is None
    assert world.bindings.get(NS, "c1") is None


async def test_a_refused_cluster_gets_one_warning_event_as_it_comes_refused() -> None:
    """Not one at every pass; one again when it comes refused again after its labels
    were within the bound. It names the field and who waits on it, never a label."""
    world = await world_with(crs("a", "src"))

    async def labelled(found: dict[str, str]) -> None:
        raw = await world.mgmt.get(CLUSTER_API, "Cluster", "c1", NS)
        assert raw is not None
        raw["metadata"]["labels"] = found
        await world.update(raw)

    def told() -> list[Obj]:
        events = (o for k, o in world.mgmt.objects.items() if k[1] == "Event")
        return [o for o in events if o["involvedObject"]["kind"] == "Cluster"]

    await labelled({f"k{n}": SECRET for n in range(MAX_LABELS + 1)})

    assert await reconcile(world) == NOTHING and await reconcile(world) == NOTHING
    (event,) = told()
    assert (event["type"], event["reason"]) == ("Warning", "ClusterRefused")
    about = event["involvedObject"]
    assert (about["kind"], about["namespace"], about["name"]) == ("Cluster", NS, "c1")
    assert about["apiVersion"] == CLUSTER_API
    assert f"metadata.labels: more than {MAX_LABELS} entries" in event["message"]
    assert "ClusterResourceSets being deleted, which are let go" in event["message"]
    assert SECRET not in repr(event)
    await labelled({"env": "prod"})
    await reconcile(world)
    assert len(told()) == 1
    await labelled({f"k{n}": SECRET for n in range(MAX_LABELS + 1)})
    await reconcile(world)
    assert len(told()) == 2


def test_a_refused_cluster_is_said_once_naming_the_field_never_a_value() -> None:
    controller = Controller(MemoryKube("management"), Settings(), CLUSTER_API)
    clusters = controller.informers[1]
    raw = huge_cluster(found={f"k{n}": SECRET for n in range(MAX_LABELS + 1)})
    raw["metadata"]["resourceVersion"] = "1"
    with capture_logs() as logs:
        controller._on_cluster(None, clusters.put(raw))
        again = copy.deepcopy(raw)
        again["metadata"]["resourceVersion"] = "2"
        controller._on_cluster(clusters.get(NS, "c1"), clusters.put(again))
    warned = [e for e in logs if e["log_level"] == "warning"]
    assert warned == [
        {
            "event": "Cluster refused: selected by no ClusterResourceSet, left alone",
            "cluster": f"{NS}/c1",
            "problem": f"metadata.labels: more than {MAX_LABELS} entries",
            "log_level": "warning",
        }
    ]
    assert SECRET not in repr(logs)


def test_the_owner_keeps_a_cluster_over_max_kept_bytes_as_its_summary() -> None:
    controller = Controller(MemoryKube("management"), Settings(), CLUSTER_API)
    clusters = controller.informers[1]
    heavy = cluster("c2", topology={"variables": [{"name": "v", "value": "x" * MAX_KEPT_BYTES}]})
    assert clusters.put(cluster("c1")).whole
    assert not clusters.put(heavy).whole


def test_a_binding_over_the_bound_whose_label_names_no_bucket_is_kept_as_its_record() -> None:
    controller = Controller(MemoryKube("management"), Settings(), CLUSTER_API)
    raw = binding_with({"labels": HUGE})
    assert controller._parse_mislabelled(raw) == {
        "apiVersion": raw["apiVersion"],
        "kind": raw["kind"],
        "metadata": {"name": "c1", "namespace": NS, "resourceVersion": "3"},
    }
    assert controller._parse_mislabelled(binding_with({}))["spec"] == raw["spec"]


async def test_a_refused_cluster_being_deleted_is_cleaned_up_and_the_hook_lets_it_go() -> None:
    """Its labels only select: the cleanup reads the binding, so a Cluster refused
    after its first install still has its add-ons removed as it is deleted, and the
    BeforeClusterDelete hook holds its deletion only while they are (not until
    uninstall.timeout for a cleanup that never runs)."""
    world = await world_with(crs("a", "src", uninstall={"ensure": True}))
    workload = world.ctx.workloads.clients["c1"]  # type: ignore[attr-defined]
    await reconcile(world)
    assert await workload.get("v1", "ConfigMap", "addon", NS) is not None
    raw = await world.mgmt.get(CLUSTER_API, "Cluster", "c1", NS)
    assert raw is not None
    raw["metadata"]["labels"] = {**labels(MAX_LABELS + 44), "env": "prod"}
    raw["metadata"]["deletionTimestamp"] = "2099-01-01T00:00:00Z"
    await world.update(raw)
    assert world.ctx.caches.cluster(NS, "c1").problem is not None  # type: ignore[union-attr]
    mgmt: Any = world.mgmt
    now = world.ctx.clock.wall()
    held = await hook_status(mgmt, CLUSTER_API, raw, now, parsed=ParsedCRSs())
    assert held == (HOOK_RETRY_SECONDS, "crs-controller: removing add-ons of a")
    with capture_logs() as logs:
        await reconcile(world)
    assert ("delete", "ConfigMap/addon") in workload.writes()
    assert await workload.get("v1", "ConfigMap", "addon", NS) is None
    assert "cluster refused: left alone" not in [e["event"] for e in logs]
    answer = await hook_status(mgmt, CLUSTER_API, raw, now, parsed=ParsedCRSs())
    assert answer == (0, NOTHING_TO_DO)


LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"


@pytest.mark.parametrize(
    ("total", "refused"),
    [
        (MAX_ANNOTATION_BYTES, False),
        (MAX_ANNOTATION_BYTES + 1, True),
    ],
)
@pytest.mark.parametrize("char", ["x", "é"])  # counted in bytes, as the API server does
def test_the_bound_on_a_bindings_annotations_is_the_api_servers(
    total: int, refused: bool, char: str
) -> None:
    width = len(char.encode())
    text = char * ((total - len(LAST_APPLIED)) // width)
    text += "x" * (total - len(LAST_APPLIED) - len(text) * width)
    parsed = parse_binding_object(binding_with({"annotations": {LAST_APPLIED: text}}))
    assert (parsed.model is None) is refused
    if refused:
        assert str(parsed.problem) == (
            f"binding {NS}/c1: metadata.annotations: more than {MAX_ANNOTATION_BYTES} bytes"
            " of keys and values"
        )
        assert text not in repr(parsed)


@pytest.mark.parametrize(("size", "refused"), [(34_000, False), (MAX_ANNOTATION_BYTES, True)])
async def test_a_binding_kubectl_applied_is_reconciled_within_the_api_servers_bound(
    size: int, refused: bool
) -> None:
    """``kubectl apply`` keeps the whole binding in an annotation: some 190 recorded
    objects take it past the labels' bound, which a binding's annotations are not held
    to. Written back whole, the annotation stays as it was."""
    world = await world_with(crs("a", "src"))
    workload = world.ctx.workloads.clients["c1"]  # type: ignore[attr-defined]
    await reconcile(world)
    live = await world.mgmt.get(API_VERSION, "ClusterResourceSetBinding", "c1", NS)
    assert live is not None
    text = json.dumps(live)
    text += " " * (size - len(text))
    live["metadata"]["annotations"][LAST_APPLIED] = text
    await world.mgmt.replace(live)
    world.sync_bindings()
    source = await world.mgmt.get("v1", "ConfigMap", "src", NS)
    assert source is not None
    source["data"] = configmap_source("src", payload("addon", "v2"))["data"]
    await world.update(source)
    workload.requests.clear()
    if refused:
        with pytest.raises(InvalidSpec, match=r"metadata\.annotations: more than 262144 bytes"):
            await reconcile(world)
        assert workload.writes() == []
        return
    await reconcile(world)
    assert workload.writes() == [("apply", "ConfigMap/addon")]
    written = world.mgmt.objects[(API_VERSION, "ClusterResourceSetBinding", NS, "c1")]
    assert written["metadata"]["annotations"][LAST_APPLIED] == text
    assert written["metadata"]["resourceVersion"] != live["metadata"]["resourceVersion"]
