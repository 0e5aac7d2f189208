"""Cost of the steady state, counted in the API servers' audit logs: no writes when
nothing changed, none after a restart, and each ConfigMap hashed once per change."""

from __future__ import annotations

import re
import time

import httpx

from crs_controller.testbed import ControlPlane, TestbedClient, wait_for
from crs_controller.testbed.controller import SA_USER, ControllerProcess

from .support import (
    CLUSTER_API,
    TIMEOUT,
    WORKLOAD_USER,
    add_cluster,
    audit_caught_up,
    binding_entry,
    configmap_obj,
    crs_obj,
    crs_status,
    log_records,
    manifests,
    metric,
    reconciles,
    source_configmap,
    source_secret,
    unique,
    wait_condition,
    wait_object,
    writes_by,
)

CONTROLLER_USERS = {SA_USER, WORKLOAD_USER}


def _setup(mgmt: TestbedClient, workloads, workload_clients, namespace: str) -> str:
    name = unique("steady")
    doc = manifests(configmap_obj(name, v="1"))
    mgmt.create(source_configmap(namespace, "steady", {"a": doc}))
    mgmt.create(source_secret(namespace, "steady", {"b": manifests(configmap_obj(name + "-s"))}))
    resources = [("ConfigMap", "steady"), ("Secret", "steady")]
    mgmt.create(crs_obj(namespace, "steady", resources, {"s": "1"}, mode="Reconcile"))
    for i, server in enumerate(workloads):
        add_cluster(mgmt, server, namespace, f"s{i}", {"s": "1"})
    for wl in workload_clients:
        wait_object(wl, "v1", "ConfigMap", name + "-s", "default")
    wait_condition(mgmt, namespace, "steady", "Ready", "True", "Applied")
    # The first apply ends with its events (told once the clusters' notes settle; a
    # busy machine may split them in two): wait until they have named every cluster.
    clusters = {f"s{i}" for i in range(len(workloads))}
    wait_for(lambda: _told_clusters(mgmt, namespace) >= clusters, TIMEOUT)
    return name


def _told_clusters(mgmt: TestbedClient, namespace: str) -> set[str]:
    """The clusters the namespace's Normal Events have named so far."""
    text = " ".join(
        e["message"] for e in mgmt.list("v1", "Event", namespace) if e["type"] == "Normal"
    )
    return set(re.findall(r"\bs[0-9]+\b", text))


def reconciled_clusters(controller: ControllerProcess) -> float:
    text = httpx.get(controller.url("/metrics")).text
    return metric(text, 'crs_reconciles_total{kind="cluster",result="ok"}')


def test_no_writes_in_steady_state_nor_after_restart(
    controller: ControllerProcess,
    control_plane: ControlPlane,
    mgmt: TestbedClient,
    workloads,
    workload_clients,
    namespace: str,
) -> None:
    _setup(mgmt, workloads, workload_clients, namespace)
    clusters = [f"s{i}" for i in range(len(workloads))]
    for cluster in clusters:  # the first apply's writes end with each binding's
        wait_for(lambda c=cluster: binding_entry(mgmt, namespace, c, "steady"), TIMEOUT)
    since = time.time()
    # Make the controller look again at every cluster (a Cluster event), and wait
    # until it has: then nothing may have been written.
    keys = [f"{namespace}/{c}" for c in clusters]
    before = {key: reconciles(controller, "cluster", key) for key in keys}
    poke = {"metadata": {"annotations": {"test.crs.dev/poke": "1"}}}
    for cluster in clusters:
        mgmt.patch_merge(CLUSTER_API, "Cluster", cluster, poke, namespace=namespace)
    wait_for(
        lambda: all(reconciles(controller, "cluster", k) > before[k] for k in keys),
        TIMEOUT,
        message="every cluster reconciled after the poke",
    )
    audit_caught_up(control_plane.servers)
    # Other tests' namespaces are left out: what they left there, Events and status
    # writes told a moment after their work (a Cluster another test deleted last, say)
    # or creates retried in a namespace left Terminating, may land in this window.
    assert writes_by(control_plane.servers, CONTROLLER_USERS, since, namespace) == []

    controller.restart()
    # A second of margin, but never before the poke: the first apply's last Event may
    # have been written just before it (everything since has been checked above).
    restarted = max(time.time() - 1, since)
    # Once the restarted controller has re-listed and reconciled every pair, it
    # must have written nothing: everything is already in place.
    wait_for(lambda: reconciled_clusters(controller) >= len(workloads), TIMEOUT)
    audit_caught_up(control_plane.servers)
    writes = writes_by(control_plane.servers, CONTROLLER_USERS, restarted, namespace)
    assert writes == [], "\n".join(writes)
    wait_condition(mgmt, namespace, "steady", "Ready", "True", "Applied")


def test_a_change_is_hashed_once_for_all_clusters(
    controller: ControllerProcess, mgmt: TestbedClient, workloads, workload_clients, namespace: str
) -> None:
    name = _setup(mgmt, workloads, workload_clients, namespace)
    clusters = [f"s{i}" for i in range(len(workloads))]

    def hashes() -> set[str]:
        entries = [binding_entry(mgmt, namespace, c, "steady") or {} for c in clusters]
        return {(e.get("resources") or [{}])[0].get("hash", "") for e in entries}

    old, revision = hashes(), crs_status(mgmt, namespace, "steady").get("revision")
    hashed_before = _hashed(controller, f"{namespace}/ConfigMap/steady")

    source = mgmt.get("v1", "ConfigMap", "steady", namespace)
    source["data"] = {"a": manifests(configmap_obj(name, v="2"))}
    mgmt.update(source)
    for wl in workload_clients:
        wait_object(wl, "v1", "ConfigMap", name, "default", lambda o: o["data"] == {"v": "2"})
    # The positive signs that every pass that reads the new content has run: each
    # cluster's binding is on it, and so is the CRS's status (its pass hashes too).
    wait_for(lambda: len(now := hashes()) == 1 and not now & old, TIMEOUT, message="bindings")
    wait_for(
        lambda: crs_status(mgmt, namespace, "steady").get("revision") not in (None, revision),
        TIMEOUT,
        message="the status of the new revision",
    )
    # This source's own record: hashed once for the three clusters.
    assert _hashed(controller, f"{namespace}/ConfigMap/steady") - hashed_before == 1


def _hashed(controller: ControllerProcess, source: str) -> int:
    """How often the controller has logged hashing ``source``."""
    return sum(r.get("source") == source for r in log_records(controller, "source hashed"))


def test_a_one_object_edit_costs_one_workload_write_per_cluster(
    controller: ControllerProcess,
    control_plane: ControlPlane,
    mgmt: TestbedClient,
    workloads,
    workload_clients,
    namespace: str,
) -> None:
    """Of three objects in one ConfigMap, only the edited one is sent again: the audit
    logs show exactly one write per cluster, a patch (apply) of that object."""
    names = [unique("obj") for _ in range(3)]
    objects = [configmap_obj(n, v="1") for n in names]
    mgmt.create(source_configmap(namespace, "three", {"a": manifests(*objects)}))
    mgmt.create(crs_obj(namespace, "three", [("ConfigMap", "three")], {"t": "3"}, mode="Reconcile"))
    clusters = [f"t{i}" for i in range(len(workloads))]
    for cluster, server in zip(clusters, workloads, strict=True):
        add_cluster(mgmt, server, namespace, cluster, {"t": "3"})
    for cluster in clusters:
        wait_for(lambda c=cluster: binding_entry(mgmt, namespace, c, "three"), TIMEOUT)

    def recorded_hashes() -> set[str]:
        return {
            binding_entry(mgmt, namespace, c, "three")["resources"][0]["hash"] for c in clusters
        }

    def told() -> list[dict]:
        events = mgmt.list("v1", "Event", namespace)
        ours = [e for e in events if e["involvedObject"]["name"] == "three"]
        return [e for e in ours if e["message"].startswith("applied ConfigMap/three to ")]

    def clusters_told() -> int:
        """Clusters the apply Events name so far ("to cluster t0", "to 3 clusters")."""
        counts = [re.search(r" to (\d+) clusters", e["message"]) for e in told()]
        return sum(int(c.group(1)) if c else 1 for c in counts)

    # The first apply told, in one Event or (on a loaded machine, passes spread over
    # more than the longest a note waits) several: all before the edit.
    wait_for(lambda: clusters_told() == len(clusters), TIMEOUT, message="the first apply's event")
    first_events = {e["metadata"]["name"] for e in told()}

    def edit_told() -> list[dict]:
        return [e for e in told() if e["metadata"]["name"] not in first_events]

    first = recorded_hashes()
    edited = time.time()
    source = mgmt.get("v1", "ConfigMap", "three", namespace)
    objects[1] = configmap_obj(names[1], v="2")
    source["data"] = {"a": manifests(*objects)}
    mgmt.update(source)
    wait_for(lambda: not (recorded_hashes() & first) and len(recorded_hashes()) == 1, TIMEOUT)
    for wl in workload_clients:
        wait_object(wl, "v1", "ConfigMap", names[1], "default", lambda o: o["data"] == {"v": "2"})
    audit_caught_up(control_plane.workloads)

    writes = writes_by(control_plane.workloads, {WORKLOAD_USER}, edited)
    expected = [f"{server.name} patch configmaps/{names[1]}" for server in control_plane.workloads]
    assert sorted(writes) == sorted(expected)

    # On the management cluster: each binding, and one Event for the whole edit.
    [event] = wait_for(edit_told, TIMEOUT, message="the edit's event")
    assert event["message"].startswith("applied ConfigMap/three to 3 clusters"), event
    audit_caught_up([control_plane.management])
    ours = [
        w
        for w in writes_by([control_plane.management], {SA_USER}, edited)
        if "/three." in w or any(w.endswith(f"clusterresourcesetbindings/{c}") for c in clusters)
    ]
    bindings = [f"management update clusterresourcesetbindings/{c}" for c in clusters]
    # And the new revision's snapshot, written once for every cluster.
    snapshot = [w for w in ours if "configmaps/three.revision." in w]
    assert [w.split(" ")[1] for w in snapshot] == ["create"], ours
    rest = [w for w in ours if "events/" not in w and w not in snapshot]
    assert sorted(rest) == sorted(bindings)
    assert len([w for w in ours if "events/" in w]) == 1, ours
