"""Upgrading the controller: what a new release does with the ClusterResourceSetBindings
and ClusterResourceSet statuses an older one wrote.

Each older shape (data/older_bindings.yaml, named by the commit that introduced it) is
put in place as that release left it: the objects on the workload server, applied
server-side by field manager crs-controller from the current sources, the binding
recording them with the current hashes, the CRS's status. The controller then takes
over (the CRS stops being paused) and must read the binding (the CRS is Ready), write
nothing to the workload cluster (nothing changed), rewrite the binding only to add what
the older release did not record (the outcome, or its missing fields), and keep the
inventory: once a key leaves the source, deletionPolicy Delete removes exactly the
object the older binding recorded for it.
"""

from __future__ import annotations

import time
from pathlib import Path
from string import Template
from typing import Any

import pytest
import yaml

from crs_controller.core.api.clusters import PAUSED_ANNOTATION
from crs_controller.core.manifests.hashing import object_hash, resource_hash
from crs_controller.core.render import parse_source
from crs_controller.core.rollout.plan import revision
from crs_controller.core.state.drift_decisions import fields_hash, owned_fields, owned_hash
from crs_controller.testbed import ControlPlane, TestbedClient, wait_for
from crs_controller.testbed.controller import SA_USER, ControllerProcess

from .support import (
    CLUSTER_API,
    CRS_API,
    TIMEOUT,
    Obj,
    add_cluster,
    audit_caught_up,
    available,
    binding,
    binding_entry,
    condition,
    configmap_obj,
    crs_obj,
    deployment,
    manifests,
    reconciles,
    source_configmap,
    unique,
    until_no_conflict,
    wait_condition,
    writes_by,
)

DATA = Path(__file__).parent / "data" / "older_bindings.yaml"
SHAPES = [s for s in yaml.safe_load_all(DATA.read_text()) if s]
MANAGER = "crs-controller"
SOURCE = "addons"
APPLIED = "ResourcesApplied"
WORKLOAD = 2  # index of the workload server the scenario uses

# What the controller rewrites in each older entry, as dotted paths; nothing else of
# the binding may change.
NEW_OUTCOME = {"outcome.reason", "outcome.message", "outcome.time", "outcome.observedGeneration"}
UPGRADED = {
    "identities": NEW_OUTCOME,
    "fields-hash": NEW_OUTCOME,
    "object-records": NEW_OUTCOME,
    "outcome": {"outcome.observedGeneration"},
    "progressing-not-ready": {
        "outcome.reason",
        "outcome.message",
        "outcome.time",
        "outcome.ready",
    },
}


def _fill(node: Any, values: dict[str, Any]) -> Any:
    """The fixture with its "$name" placeholders filled: a string that is exactly one
    placeholder takes the value as is (any JSON), others are substituted as text.
    Keys whose value is None are left out, as the releases wrote them."""
    if isinstance(node, dict):
        filled = {k: _fill(v, values) for k, v in node.items()}
        return {k: v for k, v in filled.items() if v is not None}
    if isinstance(node, list):
        return [_fill(item, values) for item in node]
    if isinstance(node, str) and node.startswith("$") and node[1:] in values:
        return values[node[1:]]
    if isinstance(node, str):
        return Template(node).substitute({k: str(v) for k, v in values.items()})
    return node


def _paths(node: Any, prefix: str = "") -> dict[str, Any]:
    """Leaves of a JSON value by dotted path (list items by index)."""
    if isinstance(node, dict):
        items = list(node.items())
    elif isinstance(node, list):
        items = [(str(i), v) for i, v in enumerate(node)]
    else:
        return {prefix: node}
    found: dict[str, Any] = {}
    for key, value in items:
        found |= _paths(value, f"{prefix}.{key}" if prefix else key)
    return found


def _changed(before: Any, after: Any) -> set[str]:
    old, new = _paths(before), _paths(after)
    return {p for p in old.keys() | new.keys() if old.get(p, None) != new.get(p, None)}


def _apply_as_older_release(wl: TestbedClient, source: Obj) -> list[Obj]:
    """The source's objects applied as an older release did (server-side apply, its
    field manager, the manifest as is), each with what its inventory entry records."""
    records = []
    for obj in parse_source(source):
        live = wl.apply(obj, field_manager=MANAGER)
        if obj["kind"] == "Deployment":
            wl.update_status({**live, "status": available(live)})
        owned = owned_fields(live, MANAGER)
        records.append(
            {
                "apiVersion": obj["apiVersion"],
                "kind": obj["kind"],
                "namespace": obj["metadata"]["namespace"],
                "name": obj["metadata"]["name"],
                "objectHash": object_hash(obj),
                "objectGeneration": live["metadata"].get("generation"),
                "fields": owned_hash(owned),
                "owned": owned,
            }
        )
    return records


def _older_binding(shape: Obj, values: dict[str, Any], records: list[Obj]) -> Obj:
    objects = [_fill(shape["object"], {**values, **r}) for r in records]
    return _fill(shape["entry"], {**values, "objects": objects})


def _names(entry: Obj) -> list[str]:
    return [o["name"] for o in entry["resources"][0]["objects"]]


@pytest.mark.parametrize("shape", SHAPES, ids=[s["shape"] for s in SHAPES])
def test_an_older_binding_is_read_kept_and_its_inventory_used(
    controller: ControllerProcess,
    control_plane: ControlPlane,
    mgmt: TestbedClient,
    workload_clients: list[TestbedClient],
    namespace: str,
    shape: Obj,
) -> None:
    server, wl = control_plane.workloads[WORKLOAD], workload_clients[WORKLOAD]
    prefix, cluster = unique("upgr"), unique("older")
    user = f"crs-{cluster}"  # this Cluster's own user in the workload audit log
    key = f"{namespace}/{cluster}"
    objects = {
        "a": deployment(f"{prefix}-a"),
        "b": configmap_obj(f"{prefix}-b", v="1"),
        "c": configmap_obj(f"{prefix}-c", v="1"),
    }
    source = mgmt.create(
        source_configmap(namespace, SOURCE, {k: manifests(o) for k, o in objects.items()})
    )
    extra = {"healthCheck": shape["healthCheck"]} if "healthCheck" in shape else {}
    crs = crs_obj(
        namespace,
        SOURCE,
        [("ConfigMap", SOURCE)],
        {"upgr": cluster},
        mode="Reconcile",
        deletionPolicy="Delete",
        driftDetection="Content",
        **extra,
    )
    # Paused, the CRS is left alone: the older release's state goes in place first.
    crs["metadata"]["annotations"] = {PAUSED_ANNOTATION: "true"}
    crs = mgmt.create(crs)
    generation = crs["metadata"]["generation"]

    records = _apply_as_older_release(wl, source)
    digest = resource_hash(source)
    values = {
        "crs": SOURCE,
        "source": SOURCE,
        "cluster": cluster,
        "deployment": f"{prefix}-a",
        "hash": digest,
        "generation": sum(r["objectGeneration"] or 0 for r in records),
        "fieldsHash": fields_hash([r["owned"] for r in records]),
        "crsGeneration": generation,
        "revision": revision([("ConfigMap", SOURCE, digest)]),
    }
    older = _older_binding(shape, values, records)
    add_cluster(mgmt, server, namespace, cluster, {"upgr": cluster}, user=user)
    wait_for(lambda: reconciles(controller, "cluster", key) > 0, TIMEOUT)
    seen = reconciles(controller, "cluster", key)
    owner = {"apiVersion": CRS_API, "kind": "ClusterResourceSet", "name": SOURCE}
    mgmt.create(
        {
            "apiVersion": CRS_API,
            "kind": "ClusterResourceSetBinding",
            "metadata": {
                "name": cluster,
                "namespace": namespace,
                "ownerReferences": [{**owner, "uid": crs["metadata"]["uid"]}],
            },
            "spec": {"clusterName": cluster, "bindings": [older]},
        }
    )
    # A paused CRS gets its Paused condition from this release: write the older status
    # after that, on the CRS as it is now (this release keeps the rest as it was).
    wait_condition(mgmt, namespace, SOURCE, "Paused", "True", "Paused")
    older_status = _fill(shape["status"], values)

    def write_older_status() -> None:
        live = mgmt.get(CRS_API, "ClusterResourceSet", SOURCE, namespace) or {}
        mgmt.update_status({**live, "status": older_status})

    until_no_conflict(write_older_status)
    # Let the binding reach the controller's cache: a reconcile of its cluster runs
    # after it is created, and (the CRS paused) leaves it exactly as the release wrote it.
    wait_for(lambda: reconciles(controller, "cluster", key) > seen, TIMEOUT)
    assert binding_entry(mgmt, namespace, cluster, SOURCE) == older
    audit_caught_up([server, control_plane.management])

    # The controller takes over.
    since = time.time()
    seen = reconciles(controller, "cluster", key)
    unpause = {"metadata": {"annotations": {PAUSED_ANNOTATION: None}}}
    mgmt.patch_merge(CRS_API, "ClusterResourceSet", SOURCE, unpause, namespace=namespace)
    wait_for(lambda: reconciles(controller, "cluster", key) > seen, TIMEOUT)

    def upgraded() -> Obj | None:
        entry = binding_entry(mgmt, namespace, cluster, SOURCE) or {}
        outcome = entry.get("outcome") or {}
        done = outcome.get("reason") == "Applied" and outcome.get("observedGeneration")
        return entry if done else None

    entry = wait_for(upgraded, TIMEOUT, message="the binding's outcome upgraded")
    audit_caught_up([server, control_plane.management])

    # Nothing was applied again: the inventory's hashes are the sources'.
    assert writes_by([server], {user}, since) == []
    # The binding: one write, adding only what the older release did not record.
    bindings = writes_by([control_plane.management], {SA_USER}, since)
    bindings = [w for w in bindings if w.endswith(f"clusterresourcesetbindings/{cluster}")]
    assert bindings == [f"management update clusterresourcesetbindings/{cluster}"]
    assert _changed(older, entry) == UPGRADED[shape["shape"]], entry
    assert entry["outcome"]["message"] == "all resources applied"
    assert entry["outcome"]["observedGeneration"] == generation
    after = binding(mgmt, namespace, cluster) or {}
    # Owned by its Cluster now too, whose uid it records.
    uid = (mgmt.get(CLUSTER_API, "Cluster", cluster, namespace) or {})["metadata"]["uid"]
    of_cluster, of_crs = after["metadata"]["ownerReferences"]
    assert of_cluster["apiVersion"].startswith("cluster.x-k8s.io/")  # the version read
    assert {**of_cluster, "apiVersion": ""} == {
        "apiVersion": "",
        "kind": "Cluster",
        "name": cluster,
        "uid": uid,
    }
    assert of_crs == {**owner, "uid": crs["metadata"]["uid"]}
    assert after["metadata"]["annotations"]["addons.crs.dev/cluster-uid"] == uid

    # The status: the controller's own, from the upgraded binding (a CRS reconcile
    # after it, made sure of by a poke).
    crs_key = f"{namespace}/{SOURCE}"
    seen = reconciles(controller, "crs", crs_key)
    poke = {"metadata": {"annotations": {"test.crs.dev/poke": "1"}}}
    mgmt.patch_merge(CRS_API, "ClusterResourceSet", SOURCE, poke, namespace=namespace)
    wait_for(lambda: reconciles(controller, "crs", crs_key) > seen, TIMEOUT)
    ready = wait_condition(mgmt, namespace, SOURCE, "Ready", "True", "Applied")
    status = (mgmt.get(CRS_API, "ClusterResourceSet", SOURCE, namespace) or {})["status"]
    assert status["observedGeneration"] == generation
    assert status["revision"] == values["revision"]
    counts = [status[k] for k in ("matchingClusters", "appliedClusters", "failedClusters")]
    assert counts == [1, 1, 0]
    applied = condition({"status": status}, "ResourcesApplied") or {}
    assert (applied["status"], applied["reason"]) == ("True", "Applied")
    if "outcome" in older:
        # Read from the older outcome, a condition whose status did not change keeps
        # the older release's transition time. (Without one, the cluster counts as
        # not applied until its first pass records an outcome.)
        # (Ready went Unknown while the CRS was paused for the hand-over: its time is
        # the unpause's, as for any paused CRS.)
        was = condition({"status": _fill(shape["status"], values)}, APPLIED) or {}
        assert applied["lastTransitionTime"] == was["lastTransitionTime"]
        assert ready["status"] == "True"

    # The inventory is used: "c" leaves the source; only the older binding recorded
    # that object, and deletionPolicy Delete removes exactly it.
    edited = time.time()
    source = mgmt.get("v1", "ConfigMap", SOURCE, namespace) or {}
    del source["data"]["c"]
    mgmt.update(source)
    gone = f"{prefix}-c"
    wait_for(lambda: wl.get("v1", "ConfigMap", gone, "default") is None, TIMEOUT)
    new_digest = resource_hash(source)

    def recorded_edit() -> Obj | None:
        entry = binding_entry(mgmt, namespace, cluster, SOURCE) or {}
        done = entry.get("resources", [{}])[0].get("hash") == new_digest
        return entry if done else None

    entry = wait_for(recorded_edit, TIMEOUT, message="the edit recorded")
    audit_caught_up([server, control_plane.management])
    writes = writes_by([server], {user}, edited)
    expected = [f"{server.name} delete configmaps/{gone}"]
    if "hash" not in shape["object"]:
        # No object hashes recorded: every object left is sent once, then recorded.
        expected += [
            f"{server.name} patch deployments/{prefix}-a",
            f"{server.name} patch configmaps/{prefix}-b",
        ]
    assert sorted(writes) == sorted(expected)
    assert _names(entry) == [f"{prefix}-a", f"{prefix}-b"]
    assert all(o.get("hash") for o in entry["resources"][0]["objects"])
    for name, kind in ((f"{prefix}-a", "Deployment"), (f"{prefix}-b", "ConfigMap")):
        api = "apps/v1" if kind == "Deployment" else "v1"
        assert wl.get(api, kind, name, "default") is not None
