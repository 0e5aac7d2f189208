"""Revision history and rollback on real servers: each revision gets one snapshot
(a ConfigMap, and a Secret for Secret content), at most revisionHistoryLimit are
kept, and they go with the CRS; `crs-controller rollback` puts the clusters back on
an older revision and `--resume` on the sources' again; a forged snapshot is
refused by the command (nothing written) and, asked for by hand, by the controller,
nothing of it applied; a rollback holds across a restart once its
request is gone, and an edit of the sources ends it (the revision rolled back from,
edited back to, is rolled out); with onFailure: Rollback a canary that fails its
step comes back to the previous content by itself (what the failing revision
changed or removed comes back), while the other clusters never took the failing
revision, and the Event names the failure."""

from __future__ import annotations

import base64
import copy
import json
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from crs_controller.app.cli import main
from crs_controller.core.rollout.history import ROLLBACK_ANNOTATION
from crs_controller.core.rollout.snapshots import SNAPSHOT_LABEL, snapshot_name
from crs_controller.testbed import ControlPlane, TestbedClient, wait_for
from crs_controller.testbed.controller import ControllerProcess

from .support import (
    CRS_API,
    TIMEOUT,
    add_cluster,
    admin_kubeconfig,
    audit_caught_up,
    binding_entry,
    configmap_obj,
    crs_obj,
    deployment,
    manifests,
    metric,
    reconciles,
    requests_by,
    source_configmap,
    source_secret,
    unique,
    until_no_conflict,
    wait_condition,
)

Obj = dict[str, Any]
KIND = "ClusterResourceSet"


@pytest.fixture
def kubeconfig(control_plane: ControlPlane, tmp_path: Path) -> str:
    return admin_kubeconfig(control_plane, tmp_path)


def status(mgmt: TestbedClient, namespace: str, name: str) -> Obj:
    return (mgmt.get(CRS_API, KIND, name, namespace) or {}).get("status") or {}


def history(mgmt: TestbedClient, namespace: str, name: str) -> list[tuple[str, str]]:
    return [(h["revision"], h["outcome"]) for h in status(mgmt, namespace, name).get("history", [])]


def edit(mgmt: TestbedClient, namespace: str, name: str, *objects: Obj) -> None:
    source = mgmt.get("v1", "ConfigMap", name, namespace)
    assert source is not None
    source["data"] = {"a": manifests(*objects)}
    mgmt.update(source)


def complete_revision(mgmt: TestbedClient, namespace: str, name: str, before: str | None) -> str:
    """The new revision, once its rollout completed."""

    def done() -> str | None:
        now = status(mgmt, namespace, name)
        rev = now.get("revision")
        if rev and rev != before and (rev, "Complete") in history(mgmt, namespace, name):
            return str(rev)
        return None

    return wait_for(done, TIMEOUT, message="a new revision Complete in the history")


def value_on(client: TestbedClient, name: str) -> str | None:
    live = client.get("v1", "ConfigMap", name, "default")
    return None if live is None else live["data"]["v"]


def reasons(mgmt: TestbedClient, namespace: str) -> list[Obj]:
    return mgmt.list("v1", "Event", namespace)


def snapshots(mgmt: TestbedClient, namespace: str, uid: str) -> list[str]:
    found = []
    for kind in ("ConfigMap", "Secret"):
        items = mgmt.list("v1", kind, namespace, label_selector=f"{SNAPSHOT_LABEL}={uid}")
        found += [f"{kind}/{item['metadata']['name']}" for item in items]
    return sorted(found)


def test_history_keeps_one_snapshot_per_revision_within_the_limit_and_goes_with_the_crs(
    controller: ControllerProcess,
    control_plane: ControlPlane,
    mgmt: TestbedClient,
    namespace: str,
    kubeconfig: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    marker = unique("hist")
    mgmt.create(source_configmap(namespace, "hist", {"a": manifests(configmap_obj(marker, v="1"))}))
    token = configmap_obj(f"{marker}-t", token="t0p-secret-value")
    mgmt.create(source_secret(namespace, "hist-token", {"b": manifests(token)}))
    resources = [("ConfigMap", "hist"), ("Secret", "hist-token")]
    crs = crs_obj(namespace, "hist", resources, {"undo": namespace[-6:]}, mode="Reconcile")
    crs["spec"]["revisionHistoryLimit"] = 2
    uid = mgmt.create(crs)["metadata"]["uid"]
    for index in range(2):  # two clusters, one snapshot
        workload = control_plane.workloads[index % len(control_plane.workloads)]
        add_cluster(mgmt, workload, namespace, f"hist{index}", {"undo": namespace[-6:]})
    first = complete_revision(mgmt, namespace, "hist", None)
    name = snapshot_name("hist", first)
    assert wait_for(lambda: snapshots(mgmt, namespace, uid), TIMEOUT) == [
        f"ConfigMap/{name}",
        f"Secret/{name}",
    ]
    configmap = mgmt.get("v1", "ConfigMap", name, namespace)
    assert configmap is not None and configmap["immutable"] is True
    assert configmap["metadata"]["ownerReferences"][0]["uid"] == uid
    # Secret content is kept only in the Secret.
    text = json.dumps(configmap)
    assert "t0p-secret" not in text
    assert base64.b64encode(b"t0p-secret-value").decode() not in text

    edit(mgmt, namespace, "hist", configmap_obj(marker, v="2"))
    second = complete_revision(mgmt, namespace, "hist", first)
    edit(mgmt, namespace, "hist", configmap_obj(marker, v="3"))
    third = complete_revision(mgmt, namespace, "hist", second)
    assert history(mgmt, namespace, "hist") == [(second, "Complete"), (third, "Complete")]
    # The revision dropped from the history lost its snapshot; one per kept revision.
    wait_for(
        lambda: (
            len(snapshots(mgmt, namespace, uid)) == 4
            and mgmt.get("v1", "ConfigMap", name, namespace) is None
        ),
        TIMEOUT,
        message="the first revision's snapshot deleted",
    )

    capsys.readouterr()
    args = ["history", "hist", "-n", namespace, "--kubeconfig", kubeconfig]
    assert main([*args, "-o", "json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert [(e["revision"], e.get("now")) for e in shown] == [(second, None), (third, "rolledOut")]
    assert main(args) == 0
    assert "REVISION" in capsys.readouterr().out
    assert main(["history", "absent", "-n", namespace, "--kubeconfig", kubeconfig]) == 2

    mgmt.delete(CRS_API, KIND, "hist", namespace)
    wait_for(lambda: mgmt.get(CRS_API, KIND, "hist", namespace) is None, TIMEOUT)
    assert snapshots(mgmt, namespace, uid) == []


def two_revisions(
    mgmt: TestbedClient, control_plane: ControlPlane, namespace: str, name: str
) -> tuple[str, str, str]:
    """A CRS ``name`` on one cluster (``<name>0``) whose ConfigMap's value went from
    1 to 2: the object's name, and the two revisions, both complete."""
    marker = unique(name)
    mgmt.create(source_configmap(namespace, name, {"a": manifests(configmap_obj(marker, v="1"))}))
    crs = crs_obj(namespace, name, [("ConfigMap", name)], {"undo": namespace[-6:]}, "Reconcile")
    mgmt.create(crs)
    add_cluster(mgmt, control_plane.workloads[0], namespace, f"{name}0", {"undo": namespace[-6:]})
    first = complete_revision(mgmt, namespace, name, None)
    edit(mgmt, namespace, name, configmap_obj(marker, v="2"))
    return marker, first, complete_revision(mgmt, namespace, name, first)


def rolled_back(
    mgmt: TestbedClient, wl: TestbedClient, namespace: str, name: str, marker: str, kubeconfig: str
) -> None:
    """Run ``crs-controller rollback`` to the last completed revision; returns once its
    content (value 1) is back on the cluster and the status says RolledBack."""
    assert main(["rollback", name, "-n", namespace, "--kubeconfig", kubeconfig]) == 0
    wait_for(lambda: value_on(wl, marker) == "1", TIMEOUT, message="the first content back")
    wait_condition(mgmt, namespace, name, "Ready", "False", "RolledBack")


def request_of(mgmt: TestbedClient, namespace: str, name: str) -> str | None:
    crs = mgmt.get(CRS_API, KIND, name, namespace) or {}
    return ((crs.get("metadata") or {}).get("annotations") or {}).get(ROLLBACK_ANNOTATION)


def test_a_manual_rollback_goes_back_and_resume_goes_forward(
    controller: ControllerProcess,
    control_plane: ControlPlane,
    mgmt: TestbedClient,
    workload_clients: list[TestbedClient],
    namespace: str,
    kubeconfig: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    marker, first, second = two_revisions(mgmt, control_plane, namespace, "man")
    wl = workload_clients[0]
    assert value_on(wl, marker) == "2"
    cli = ["-n", namespace, "--kubeconfig", kubeconfig]

    assert main(["rollback", "man", *cli, "--to-revision", "xxh3:ffffffffffffffff"]) == 2
    assert main(["rollback", "absent", *cli]) == 2
    assert main(["rollback", "man", *cli]) == 0  # the last completed revision: the first
    wait_for(lambda: value_on(wl, marker) == "1", TIMEOUT, message="the first content back")
    cond = wait_condition(mgmt, namespace, "man", "Ready", "False", "RolledBack")
    assert second in cond["message"]
    rollout = status(mgmt, namespace, "man")["rollout"]
    assert (rollout["phase"], rollout["rolledBackFrom"]) == ("RolledBack", second)
    assert status(mgmt, namespace, "man")["revision"] == first
    assert history(mgmt, namespace, "man") == [(second, "RolledBack"), (first, "Complete")]
    # diff shows what the controller applies: the snapshot rolled back to, in place.
    capsys.readouterr()
    assert main(["diff", "man", "--cluster", "man0", *cli]) == 0
    out, err = capsys.readouterr()
    assert out == "" and f"a rollback is in force: revision {first}" in err, err

    assert main(["rollback", "man", *cli, "--resume"]) == 0
    wait_for(lambda: value_on(wl, marker) == "2", TIMEOUT, message="the sources' content again")
    wait_condition(mgmt, namespace, "man", "Ready", "True", "Applied")
    now = status(mgmt, namespace, "man")
    # No spec.rollout: the rollback's own rollout status goes with it.
    assert now["revision"] == second and "rollout" not in now


@pytest.fixture
def own_controller(controller: ControllerProcess, namespace: str) -> Iterator[ControllerProcess]:
    """A controller of the test's own for ``namespace``, to restart at will; the
    session's is stopped meanwhile, so that only this one acts there."""
    controller.stop()
    try:
        args = ("--namespace", namespace, "--log-level", "debug")
        with ControllerProcess(controller.management, *args) as process:
            yield process
    finally:
        controller.start()


def test_a_rollback_holds_across_a_restart_once_its_request_is_removed(
    own_controller: ControllerProcess,
    control_plane: ControlPlane,
    mgmt: TestbedClient,
    workload_clients: list[TestbedClient],
    namespace: str,
    kubeconfig: str,
) -> None:
    marker, first, second = two_revisions(mgmt, control_plane, namespace, "keep")
    wl = workload_clients[0]
    rolled_back(mgmt, wl, namespace, "keep", marker, kubeconfig)
    assert request_of(mgmt, namespace, "keep") == f"{second}/{first}"
    kept = history(mgmt, namespace, "keep")

    def without_request() -> None:  # as a GitOps tool re-applying the CRS would
        crs = mgmt.get(CRS_API, KIND, "keep", namespace)
        assert crs is not None
        del crs["metadata"]["annotations"][ROLLBACK_ANNOTATION]
        mgmt.update(crs)

    crs_key, cluster_key = f"{namespace}/keep", f"{namespace}/keep0"
    looked = reconciles(own_controller, "crs", crs_key)
    until_no_conflict(without_request)
    wait_for(
        lambda: reconciles(own_controller, "crs", crs_key) > looked,
        TIMEOUT,
        message="the CRS looked at without its request",
    )
    own_controller.stop()
    looked = reconciles(own_controller, "crs", crs_key)
    applied = reconciles(own_controller, "cluster", cluster_key)
    own_controller.start()
    wait_for(
        lambda: (
            reconciles(own_controller, "crs", crs_key) > looked
            and reconciles(own_controller, "cluster", cluster_key) > applied
        ),
        TIMEOUT,
        message="the CRS and its cluster looked at after the restart",
    )
    now = status(mgmt, namespace, "keep")
    assert now["revision"] == first
    assert (now["rollout"]["phase"], now["rollout"]["rolledBackFrom"]) == ("RolledBack", second)
    assert history(mgmt, namespace, "keep") == kept
    assert value_on(wl, marker) == "1"
    assert request_of(mgmt, namespace, "keep") is None


def test_an_edit_of_the_sources_ends_a_rollback_and_an_edit_back_rolls_that_revision_out(
    controller: ControllerProcess,
    control_plane: ControlPlane,
    mgmt: TestbedClient,
    workload_clients: list[TestbedClient],
    namespace: str,
    kubeconfig: str,
) -> None:
    marker, first, second = two_revisions(mgmt, control_plane, namespace, "end")
    wl = workload_clients[0]
    rolled_back(mgmt, wl, namespace, "end", marker, kubeconfig)

    edit(mgmt, namespace, "end", configmap_obj(marker, v="3"))
    third = complete_revision(mgmt, namespace, "end", first)
    assert value_on(wl, marker) == "3"
    # No spec.rollout: the rollback's rollout status, rolledBackFrom with it, is gone.
    assert "rollout" not in status(mgmt, namespace, "end")
    wait_for(
        lambda: request_of(mgmt, namespace, "end") is None,
        TIMEOUT,
        message="the request about the revision rolled back from removed",
    )
    assert history(mgmt, namespace, "end") == [
        (second, "RolledBack"),
        (first, "Complete"),
        (third, "Complete"),
    ]

    # Back to the revision rolled back from: rolled out as any edit (docs/rollout.md),
    # as a Deployment whose template is reverted rolls it out.
    edit(mgmt, namespace, "end", configmap_obj(marker, v="2"))
    assert complete_revision(mgmt, namespace, "end", third) == second
    wait_for(lambda: value_on(wl, marker) == "2", TIMEOUT, message="the second content again")
    assert "rollout" not in status(mgmt, namespace, "end")
    assert history(mgmt, namespace, "end") == [
        (first, "Complete"),
        (third, "Complete"),
        (second, "Complete"),
    ]


def forge(mgmt: TestbedClient, namespace: str, name: str, value: str) -> None:
    """Replace a snapshot, as an admin could (the policy keeps tenants from it), with
    the same labels and owner but other content."""
    live = mgmt.get("v1", "ConfigMap", name, namespace)
    assert live is not None
    forged = copy.deepcopy(live)
    document = json.loads(forged["data"]["sources.json"])
    document["sources"][0]["data"]["a"] = document["sources"][0]["data"]["a"].replace(
        "v: '1'", f"v: '{value}'"
    )
    assert value in json.dumps(document)
    forged["data"]["sources.json"] = json.dumps(document)
    for field in ("resourceVersion", "uid", "creationTimestamp", "managedFields"):
        forged["metadata"].pop(field, None)
    mgmt.delete("v1", "ConfigMap", name, namespace)
    wait_for(lambda: mgmt.get("v1", "ConfigMap", name, namespace) is None, TIMEOUT)
    mgmt.create(forged)


def test_a_forged_snapshot_is_refused_and_nothing_of_it_applied(
    controller: ControllerProcess,
    control_plane: ControlPlane,
    mgmt: TestbedClient,
    workload_clients: list[TestbedClient],
    namespace: str,
    kubeconfig: str,
) -> None:
    marker = unique("forge")
    mgmt.create(source_configmap(namespace, "fg", {"a": manifests(configmap_obj(marker, v="1"))}))
    crs = crs_obj(namespace, "fg", [("ConfigMap", "fg")], {"undo": namespace[-6:]}, "Reconcile")
    mgmt.create(crs)
    add_cluster(mgmt, control_plane.workloads[0], namespace, "fg0", {"undo": namespace[-6:]})
    first = complete_revision(mgmt, namespace, "fg", None)
    edit(mgmt, namespace, "fg", configmap_obj(marker, v="2"))
    second = complete_revision(mgmt, namespace, "fg", first)
    forge(mgmt, namespace, snapshot_name("fg", first), "forged")

    # The command checks the snapshot as the controller does: refused, nothing written.
    cli = ["-n", namespace, "--kubeconfig", kubeconfig]
    assert main(["rollback", "fg", *cli, "--to-revision", first]) == 2
    assert request_of(mgmt, namespace, "fg") is None

    def by_hand() -> None:  # as `kubectl annotate` would ask for it
        crs = mgmt.get(CRS_API, KIND, "fg", namespace)
        assert crs is not None
        crs["metadata"].setdefault("annotations", {})[ROLLBACK_ANNOTATION] = f"{second}/{first}"
        mgmt.update(crs)

    until_no_conflict(by_hand)
    events = wait_for(
        lambda: [e for e in reasons(mgmt, namespace) if e["reason"] == "RollbackRefused"],
        TIMEOUT,
        message="a RollbackRefused Event",
    )
    assert "does not hash to it" in events[0]["message"]
    assert "rollback refused" in status(mgmt, namespace, "fg")["rollout"]["message"]
    assert value_on(workload_clients[0], marker) == "2"
    assert "forged" not in json.dumps(binding_entry(mgmt, namespace, "fg0", "fg"))


def cluster_user(name: str) -> str:
    return f"undo-{name}"


def patched_by(plane: ControlPlane, users: set[str], resource: str, since: float) -> list[str]:
    """The users among ``users`` that applied ``resource`` ("deployments/x") since then."""
    found = []
    for server in plane.workloads:
        for event in server.audit_events():
            ref = event.get("objectRef", {})
            if event["user"]["username"] not in users or event["verb"] != "patch":
                continue
            if f"{ref.get('resource')}/{ref.get('name')}" != resource:
                continue
            stamp = datetime.fromisoformat(event["requestReceivedTimestamp"].replace("Z", "+00:00"))
            if stamp.timestamp() >= since:
                found.append(event["user"]["username"])
    return found


def test_a_failed_canary_rolls_back_by_itself_and_nobody_else_takes_the_revision(
    controller: ControllerProcess,
    control_plane: ControlPlane,
    mgmt: TestbedClient,
    workload_clients: list[TestbedClient],
    namespace: str,
) -> None:
    marker, bad = unique("auto"), unique("never")
    good, second = configmap_obj(marker, v="1"), configmap_obj(f"{marker}-b", v="1")
    mgmt.create(source_configmap(namespace, "auto", {"a": manifests(good, second)}))
    crs = crs_obj(namespace, "auto", [("ConfigMap", "auto")], {"undo": namespace[-6:]}, "Reconcile")
    crs["spec"]["deletionPolicy"] = "Delete"
    crs["spec"]["healthCheck"] = {"wait": True, "timeout": "3s"}
    crs["spec"]["rollout"] = {
        "maxConcurrent": 1,
        "onFailure": "Rollback",
        "steps": [{"clusterSelector": {"matchLabels": {"ring": "canary"}}}],
    }
    mgmt.create(crs)
    names = ["a1", "a2", "a3"]
    for index, name in enumerate(names):
        labels = {"undo": namespace[-6:], "ring": "canary" if name == "a1" else "rest"}
        workload = control_plane.workloads[index % len(control_plane.workloads)]
        add_cluster(mgmt, workload, namespace, name, labels, user=cluster_user(name))
    previous = complete_revision(mgmt, namespace, "auto", None)
    counted = 'crs_rollbacks_total{trigger="OnFailure"}'
    rollbacks = metric(httpx.get(controller.url("/metrics")).text, counted)
    before = {c: binding_entry(mgmt, namespace, c, "auto")["resources"][0]["hash"] for c in names}

    edited = time.time()
    # A Deployment that never becomes available (the test bed runs no controllers);
    # the first object's value changed, the second object dropped.
    edit(mgmt, namespace, "auto", configmap_obj(marker, v="bad"), deployment(bad))
    cond = wait_condition(mgmt, namespace, "auto", "Ready", "False", "RolledBack")
    now = status(mgmt, namespace, "auto")
    failing = now["rollout"]["rolledBackFrom"]
    assert now["revision"] == previous and failing != previous
    assert failing in cond["message"]
    assert history(mgmt, namespace, "auto")[-2:] == [
        (failing, "RolledBack"),
        (previous, "Complete"),
    ]
    # The canary is back on the previous content: the Deployment it added is gone, the
    # value it changed and the object it removed are back.
    after = {c: binding_entry(mgmt, namespace, c, "auto")["resources"][0]["hash"] for c in names}
    assert after == before
    wl = workload_clients[0]
    wait_for(lambda: wl.get("apps/v1", "Deployment", bad, "default") is None, TIMEOUT)
    assert value_on(wl, marker) == "1"
    assert value_on(wl, f"{marker}-b") == "1"
    # The canary took the failing revision (its change and removal included); the
    # others never did.
    resource = f"deployments/{bad}"
    users = {cluster_user(c) for c in names}
    assert set(patched_by(control_plane, users, resource, edited)) == {cluster_user("a1")}
    audit_caught_up(control_plane.workloads)
    canary = requests_by(control_plane.workloads, {cluster_user("a1")}, edited, {"delete"})
    assert any(r.endswith(f" delete configmaps/{marker}-b") for r in canary), canary
    assert cluster_user("a1") in patched_by(control_plane, users, f"configmaps/{marker}", edited)
    others = {cluster_user(c) for c in names if c != "a1"}
    assert requests_by(control_plane.workloads, others, edited, {"delete"}) == []
    assert patched_by(control_plane, others, f"configmaps/{marker}", edited) == []
    # The Event names the failure rolled back from, not only its revision.
    events = wait_for(
        lambda: [e for e in reasons(mgmt, namespace) if e["reason"] == "RolloutRolledBack"],
        TIMEOUT,
        message="a RolloutRolledBack Event",
    )
    said = events[0]["message"]
    assert f"the rollout of {failing} halted: 1 cluster failed (maximum 0): a1" in said, said
    # Counted once (no other test here rolls back by itself).
    assert metric(httpx.get(controller.url("/metrics")).text, counted) == rollbacks + 1
