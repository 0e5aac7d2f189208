"""Rollouts on real servers. Each cluster reaches its workload server as a user of its
own, so the audit logs tell which cluster an apply was for and when: steps run in
order, one cluster at a time, with the soak between them; a revision that is not
Ready on the canary halts and reaches nobody else, and reverting it goes to the
canary first; paused freezes (first installs still go out) and unpausing resumes."""

from __future__ import annotations

import itertools
import threading
import time
from datetime import datetime
from typing import Any

import httpx

from crs_controller.testbed import ControlPlane, TestbedClient, wait_for
from crs_controller.testbed.controller import ControllerProcess

from .support import (
    CRS_API,
    TIMEOUT,
    add_cluster,
    available,
    binding_entry,
    condition,
    configmap_obj,
    crs_obj,
    deployment,
    manifests,
    metric,
    source_configmap,
    unique,
    wait_condition,
)

Obj = dict[str, Any]


def cluster_user(name: str) -> str:
    return f"rollout-{name}"


def add(
    mgmt: TestbedClient, plane: ControlPlane, namespace: str, index: int, name: str, **labels: str
) -> None:
    workload = plane.workloads[index % len(plane.workloads)]
    labels = {"roll": namespace[-6:], **labels}
    add_cluster(mgmt, workload, namespace, name, labels, user=cluster_user(name))


def applies(
    plane: ControlPlane, clusters: list[str], since: float, resource: str
) -> list[tuple[float, str]]:
    """(time, cluster) of each apply of ``resource`` ("configmaps/x") since ``since``."""
    users = {cluster_user(c): c for c in clusters}
    found = []
    for server in plane.workloads:
        for event in server.audit_events():
            user = event["user"]["username"]
            ref = event.get("objectRef", {})
            if user not in users or event["verb"] != "patch":
                continue
            if f"{ref.get('resource')}/{ref.get('name')}" != resource:
                continue
            stamp = datetime.fromisoformat(event["requestReceivedTimestamp"].replace("Z", "+00:00"))
            if stamp.timestamp() >= since:
                found.append((stamp.timestamp(), users[user]))
    return sorted(found)


def rollout(mgmt: TestbedClient, namespace: str, name: str) -> Obj:
    crs = mgmt.get(CRS_API, "ClusterResourceSet", name, namespace)
    return (crs or {}).get("status", {}).get("rollout") or {}


def reasons(mgmt: TestbedClient, namespace: str) -> set[str]:
    """The reasons of the namespace's Events so far."""
    return {e["reason"] for e in mgmt.list("v1", "Event", namespace)}


def edit(mgmt: TestbedClient, namespace: str, name: str, *objects: Obj) -> None:
    source = mgmt.get("v1", "ConfigMap", name, namespace)
    source["data"] = {"a": manifests(*objects)}
    mgmt.update(source)


def on_hash(mgmt: TestbedClient, namespace: str, cluster: str, crs: str) -> str | None:
    # An entry exists from the first look (Pending), before anything is applied.
    resources = (binding_entry(mgmt, namespace, cluster, crs) or {}).get("resources") or [{}]
    return resources[0]["hash"] if resources[0].get("applied") else None


def test_steps_go_in_order_one_cluster_at_a_time_with_a_soak(
    controller: ControllerProcess, control_plane: ControlPlane, mgmt: TestbedClient, namespace: str
) -> None:
    marker = unique("wave")
    mgmt.create(source_configmap(namespace, "wave", {"a": manifests(configmap_obj(marker, v="1"))}))
    crs = crs_obj(
        namespace, "wave", [("ConfigMap", "wave")], {"roll": namespace[-6:]}, mode="Reconcile"
    )
    crs["spec"]["rollout"] = {
        "maxConcurrent": 1,
        "steps": [
            {"clusterSelector": {"matchLabels": {"ring": "canary"}}, "pauseAfter": "2s"},
            {"clusterSelector": {"matchLabels": {"ring": "early"}}},
        ],
    }
    mgmt.create(crs)
    rings = {"w1": "canary", "w2": "early", "w3": "early", "w4": "late", "w5": "late"}
    for index, (name, ring) in enumerate(rings.items()):
        add(mgmt, control_plane, namespace, index, name, ring=ring)
    wait_condition(mgmt, namespace, "wave", "Ready", "True", "Applied")
    assert rollout(mgmt, namespace, "wave").get("phase") == "Complete"

    edited = time.time()
    edit(mgmt, namespace, "wave", configmap_obj(marker, v="2"))
    wait_for(lambda: rollout(mgmt, namespace, "wave").get("phase") == "Progressing", TIMEOUT)
    wait_condition(mgmt, namespace, "wave", "Ready", "True", "Applied")
    assert rollout(mgmt, namespace, "wave")["updatedClusters"] == 5

    done = wait_for(
        lambda: (
            (a := applies(control_plane, list(rings), edited, f"configmaps/{marker}"))
            and len(a) == 5
            and a
        ),
        TIMEOUT,
        message="five applies in the audit logs",
    )
    order = [cluster for _, cluster in done]
    assert order[0] == "w1", order
    assert set(order[1:3]) == {"w2", "w3"}, order
    assert set(order[3:]) == {"w4", "w5"}, order
    # The canary's soak: step 2 began at least 2 s after the canary's apply.
    assert done[1][0] - done[0][0] >= 2.0, done
    wait_for(
        lambda: {"RolloutStarted", "RolloutComplete"} <= reasons(mgmt, namespace),
        TIMEOUT,
        message="RolloutStarted and RolloutComplete Events",
    )
    text = httpx.get(controller.url("/metrics")).text
    labels = f'crs="wave",namespace="{namespace}"'
    assert metric(text, f'crs_rollout_phase{{{labels},phase="Complete"}}') == 1.0
    revision = mgmt.get(CRS_API, "ClusterResourceSet", "wave", namespace)["status"]["revision"]
    assert metric(text, f'crs_rollout_clusters{{{labels},revision="{revision}"}}') == 5.0


def test_an_unhealthy_canary_halts_and_a_revert_goes_to_it_first(
    controller: ControllerProcess, control_plane: ControlPlane, mgmt: TestbedClient, namespace: str
) -> None:
    marker, bad = unique("halt"), unique("never")
    good = configmap_obj(marker, v="1")
    mgmt.create(source_configmap(namespace, "halt", {"a": manifests(good)}))
    crs = crs_obj(
        namespace, "halt", [("ConfigMap", "halt")], {"roll": namespace[-6:]}, mode="Reconcile"
    )
    crs["spec"]["healthCheck"] = {"wait": True, "timeout": "3s"}
    crs["spec"]["rollout"] = {
        "maxConcurrent": 1,
        "steps": [{"clusterSelector": {"matchLabels": {"ring": "canary"}}}],
    }
    mgmt.create(crs)
    for index, name in enumerate(["h1", "h2", "h3"]):
        add(mgmt, control_plane, namespace, index, name, ring="canary" if name == "h1" else "rest")
    wait_condition(mgmt, namespace, "halt", "Ready", "True", "Applied")
    before = {c: on_hash(mgmt, namespace, c, "halt") for c in ("h1", "h2", "h3")}

    # A Deployment that never becomes available (the test bed runs no controllers).
    edit(mgmt, namespace, "halt", good, deployment(bad))
    wait_for(lambda: rollout(mgmt, namespace, "halt").get("phase") == "Halted", TIMEOUT)
    cond = wait_condition(mgmt, namespace, "halt", "Ready", "False", "Unhealthy")
    assert f"Deployment default/{bad}" in cond["message"], cond["message"]
    assert "h1" in rollout(mgmt, namespace, "halt")["message"]
    # Halted: the others stayed on what they had.
    assert on_hash(mgmt, namespace, "h2", "halt") == before["h2"]
    assert on_hash(mgmt, namespace, "h3", "halt") == before["h3"]
    wait_for(lambda: "RolloutHalted" in reasons(mgmt, namespace), TIMEOUT, message="the Event")

    reverted = time.time()
    edit(mgmt, namespace, "halt", good)
    wait_for(lambda: rollout(mgmt, namespace, "halt").get("phase") == "Complete", TIMEOUT)
    wait_condition(mgmt, namespace, "halt", "Ready", "True", "Applied")
    assert {c: on_hash(mgmt, namespace, c, "halt") for c in ("h1", "h2", "h3")} == before
    # Only the canary had anything to take back.
    assert [
        c for _, c in applies(control_plane, ["h1", "h2", "h3"], reverted, f"configmaps/{marker}")
    ] in (
        [],
        ["h1"],
    )


def test_paused_freezes_first_installs_still_go_out_and_unpausing_resumes(
    controller: ControllerProcess,
    control_plane: ControlPlane,
    mgmt: TestbedClient,
    workload_clients,
    namespace: str,
) -> None:
    marker = unique("frozen")
    mgmt.create(
        source_configmap(namespace, "frozen", {"a": manifests(configmap_obj(marker, v="1"))})
    )
    crs = crs_obj(
        namespace, "frozen", [("ConfigMap", "frozen")], {"roll": namespace[-6:]}, mode="Reconcile"
    )
    crs["spec"]["rollout"] = {"paused": True}
    mgmt.create(crs)
    add(mgmt, control_plane, namespace, 0, "p1")
    wait_condition(mgmt, namespace, "frozen", "Ready", "True", "Applied")
    first = on_hash(mgmt, namespace, "p1", "frozen")

    edit(mgmt, namespace, "frozen", configmap_obj(marker, v="2"))
    wait_for(lambda: rollout(mgmt, namespace, "frozen").get("phase") == "Paused", TIMEOUT)
    wait_condition(mgmt, namespace, "frozen", "Ready", "False", "RolloutPaused")
    # The CRS's status may be written once before p1's own reconcile has recorded that
    # the rollout holds it (the message then says only "paused"); then it names p1.
    wait_for(
        lambda: "p1" in (paused_message(mgmt, namespace, "frozen") or ""),
        TIMEOUT,
        message="the RolloutPaused message names the held cluster",
    )
    assert on_hash(mgmt, namespace, "p1", "frozen") == first

    # A cluster added now is a first install: it gets the current content at once.
    add(mgmt, control_plane, namespace, 1, "p2")
    wait_for(lambda: on_hash(mgmt, namespace, "p2", "frozen") not in (None, first), TIMEOUT)
    live = workload_clients[1].get("v1", "ConfigMap", marker, "default")
    assert live["data"] == {"v": "2"}
    assert on_hash(mgmt, namespace, "p1", "frozen") == first

    crs = mgmt.get(CRS_API, "ClusterResourceSet", "frozen", namespace)
    crs["spec"]["rollout"]["paused"] = False
    mgmt.update(crs)
    wait_for(lambda: rollout(mgmt, namespace, "frozen").get("phase") == "Complete", TIMEOUT)
    assert on_hash(mgmt, namespace, "p1", "frozen") == on_hash(mgmt, namespace, "p2", "frozen")


class Kubelet:
    """Stands in for the workload clusters' controllers: a Deployment whose generation
    is not observed yet is made available a moment later, and when is recorded."""

    def __init__(self, clients: list[TestbedClient], name: str, delay: float = 1.0) -> None:
        self._clients, self._name, self._delay = clients, name, delay
        self.ready_at: dict[int, list[float]] = {i: [] for i in range(len(clients))}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Kubelet:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)

    def _run(self) -> None:
        while not self._stop.wait(0.1):
            for index, client in enumerate(self._clients):
                live = client.get("apps/v1", "Deployment", self._name, "default")
                status = (live or {}).get("status") or {}
                if (
                    live is None
                    or status.get("observedGeneration") == live["metadata"]["generation"]
                ):
                    continue
                time.sleep(self._delay)
                live["status"] = available(live)
                client.update_status(live)
                self.ready_at[index].append(time.time())


def test_a_step_starts_only_once_the_clusters_before_are_ready(
    controller: ControllerProcess,
    control_plane: ControlPlane,
    mgmt: TestbedClient,
    workload_clients,
    namespace: str,
) -> None:
    name = unique("gated")
    app = deployment(name)
    mgmt.create(source_configmap(namespace, "gated", {"a": manifests(app)}))
    crs = crs_obj(
        namespace, "gated", [("ConfigMap", "gated")], {"roll": namespace[-6:]}, mode="Reconcile"
    )
    crs["spec"]["healthCheck"] = {"wait": True, "timeout": "1m"}
    crs["spec"]["rollout"] = {
        "maxConcurrent": 1,
        "steps": [{"clusterSelector": {"matchLabels": {"ring": "canary"}}}],
    }
    mgmt.create(crs)
    clusters = ["g1", "g2", "g3"]  # one per workload server
    with Kubelet(workload_clients, name) as kubelet:
        for index, cluster in enumerate(clusters):
            add(
                mgmt,
                control_plane,
                namespace,
                index,
                cluster,
                ring="canary" if index == 0 else "rest",
            )
        wait_condition(mgmt, namespace, "gated", "Ready", "True", "Applied")
        edited = time.time()
        app["spec"]["template"]["spec"]["containers"][0]["image"] = "example.invalid/app:2"
        edit(mgmt, namespace, "gated", app)
        wait_for(lambda: rollout(mgmt, namespace, "gated").get("phase") == "Progressing", TIMEOUT)
        wait_for(lambda: rollout(mgmt, namespace, "gated").get("phase") == "Complete", TIMEOUT)
        wait_condition(mgmt, namespace, "gated", "Ready", "True", "Applied")
        done = wait_for(
            lambda: (
                (a := applies(control_plane, clusters, edited, f"deployments/{name}"))
                and len(a) == 3
                and a
            ),
            TIMEOUT,
        )
    # One at a time, each only once the one before was Ready; the canary first.
    order = [cluster for _, cluster in done]
    assert order[0] == "g1", order
    for (_, before), (applied_at, _) in itertools.pairwise(done):
        ready = [t for t in kubelet.ready_at[clusters.index(before)] if t >= edited]
        assert ready and applied_at > ready[0], (done, kubelet.ready_at)


def paused_message(mgmt: TestbedClient, namespace: str, name: str) -> str | None:
    """Ready's message while its reason is RolloutPaused."""
    ready = condition(mgmt.get(CRS_API, "ClusterResourceSet", name, namespace), "Ready")
    return ready["message"] if ready and ready.get("reason") == "RolloutPaused" else None
