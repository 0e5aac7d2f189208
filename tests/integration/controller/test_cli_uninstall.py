"""`crs-controller uninstall` on real servers: with a controller holding the leader
Lease it deletes the ClusterResourceSets and returns once the controller has cleaned
up (a `deletionPolicy: Delete` set's objects gone from the workload cluster, its
binding entry released, no CRS and no finalizer left); with the controller stopped
it refuses (exit 2) and deletes nothing; `--force` then removes the finalizer and
names what stays: the object on the workload cluster, still recorded in the binding
and managed by the field manager crs-controller. A Delete set whose spec the
controller refuses (a kubernetesVersions the CRD takes) is cleaned up all the same;
a set's objects are deleted before those of the set it depends on."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from crs_controller.app.cli import main
from crs_controller.core.api.clusters import PAUSED_ANNOTATION
from crs_controller.core.api.models import FINALIZER
from crs_controller.testbed import ControlPlane, TestbedClient, wait_for
from crs_controller.testbed.controller import SYSTEM_NAMESPACE, ControllerProcess, install_rbac

from .support import (
    CLUSTER_API,
    CRS_API,
    TIMEOUT,
    add_cluster,
    admin_kubeconfig,
    binding_entry,
    clear_leases,
    configmap_obj,
    crs_obj,
    manifests,
    requests_by,
    source_configmap,
    unique,
    until_no_conflict,
    wait_condition,
    wait_object,
)

KIND = "ClusterResourceSet"


def leader(control_plane: ControlPlane, namespace: str) -> ControllerProcess:
    """A controller that holds the leader Lease in crs-system, watching ``namespace``
    only (the other tests' objects are not its business)."""
    args = ("--leader-elect", "--leader-election-namespace", SYSTEM_NAMESPACE)
    return ControllerProcess(control_plane.management, *args, "--namespace", namespace)


def applied_delete_set(
    mgmt: TestbedClient, workload_client: TestbedClient, workload, namespace: str
) -> str:
    """A Delete set applied to one cluster; the name of the object it applied."""
    name = unique("uninst")
    mgmt.create(source_configmap(namespace, "addon", {"a": manifests(configmap_obj(name))}))
    crs = crs_obj(namespace, "un", [("ConfigMap", "addon")], {"un": "1"}, mode="Reconcile")
    crs["spec"]["deletionPolicy"] = "Delete"
    mgmt.create(crs)
    add_cluster(mgmt, workload, namespace, "un1", {"un": "1"})
    wait_condition(mgmt, namespace, "un", "Ready", "True", "Applied")
    wait_object(workload_client, "v1", "ConfigMap", name, "default")
    return name


def ready_to_lead(control_plane: ControlPlane, mgmt: TestbedClient, tmp_path: Path) -> str:
    """The controller's rights installed and no leader Lease left; an admin kubeconfig."""
    install_rbac(mgmt)
    clear_leases(mgmt)
    return admin_kubeconfig(control_plane, tmp_path)


def cleaned_up(
    mgmt: TestbedClient, workload_client: TestbedClient, namespace: str, name: str
) -> None:
    """The set ``un`` gone, its object ``name`` gone from the workload cluster, its entry
    released."""
    assert mgmt.get(CRS_API, KIND, "un", namespace) is None
    assert workload_client.get("v1", "ConfigMap", name, "default") is None
    assert binding_entry(mgmt, namespace, "un1", "un") is None


def uninstall(kubeconfig: str, namespace: str, *extra: str) -> int:
    argv = ["uninstall", "-n", namespace, "--kubeconfig", kubeconfig, "--timeout", "90s"]
    return main([*argv, *extra])


def test_uninstall_waits_until_the_controller_removed_a_delete_sets_objects(
    control_plane: ControlPlane,
    mgmt: TestbedClient,
    workload_clients,
    workloads,
    namespace: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    kubeconfig = ready_to_lead(control_plane, mgmt, tmp_path)
    with leader(control_plane, namespace):
        name = applied_delete_set(mgmt, workload_clients[0], workloads[0], namespace)
        assert uninstall(kubeconfig, namespace) == 0  # without --yes: only says what
        assert "would delete 1 ClusterResourceSet(s)" in capsys.readouterr().out
        assert mgmt.get(CRS_API, KIND, "un", namespace) is not None

        assert uninstall(kubeconfig, namespace, "--yes") == 0
        out = capsys.readouterr().out
        assert f"every ClusterResourceSet is cleaned up in {namespace}" in out, out
        # Other tests' namespaces may hold sets: the release may go only if none does.
        can_go = "no ClusterResourceSet is left in any namespace" in out
        assert can_go != ("do not delete the release yet" in out), out
        named = [line.split("namespace(s) ")[1] for line in out.splitlines() if "still in" in line]
        assert all(namespace not in n.split(":")[0].split(", ") for n in named), out
        # Returned only after the cleanup: nothing to wait for here.
        cleaned_up(mgmt, workload_clients[0], namespace, name)


def test_uninstall_removes_the_objects_of_a_delete_set_whose_spec_the_controller_refuses(
    control_plane: ControlPlane,
    mgmt: TestbedClient,
    workload_clients,
    workloads,
    namespace: str,
    tmp_path: Path,
) -> None:
    kubeconfig = ready_to_lead(control_plane, mgmt, tmp_path)
    with leader(control_plane, namespace):
        name = applied_delete_set(mgmt, workload_clients[0], workloads[0], namespace)

        def refuse() -> None:  # a range the CRD takes and the controller does not
            crs = mgmt.get(CRS_API, KIND, "un", namespace)
            assert crs is not None
            crs["spec"]["resources"][0]["kubernetesVersions"] = "banana"
            mgmt.update(crs)

        until_no_conflict(refuse)
        wait_condition(mgmt, namespace, "un", "Ready", "False", "InvalidSpec")
        assert uninstall(kubeconfig, namespace, "--yes") == 0
        cleaned_up(mgmt, workload_clients[0], namespace, name)


def test_uninstall_deletes_a_dependents_objects_before_its_dependencys(
    control_plane: ControlPlane,
    mgmt: TestbedClient,
    workloads,
    namespace: str,
    tmp_path: Path,
) -> None:
    kubeconfig = ready_to_lead(control_plane, mgmt, tmp_path)
    made = {"cni": unique("cni"), "csi": unique("csi")}
    user = unique("uninst-deps")
    with leader(control_plane, namespace):
        for crs_name, deps in (("cni", []), ("csi", [{"name": "cni"}])):
            source = {"a": manifests(configmap_obj(made[crs_name]))}
            mgmt.create(source_configmap(namespace, crs_name, source))
            crs = crs_obj(namespace, crs_name, [("ConfigMap", crs_name)], {"dep": "1"})
            crs["spec"].update(deletionPolicy="Delete", dependsOn=deps)
            mgmt.create(crs)
        add_cluster(mgmt, workloads[1], namespace, "dep1", {"dep": "1"}, user=user)
        wait_condition(mgmt, namespace, "csi", "Ready", "True", "Applied")
        since = time.time()
        assert uninstall(kubeconfig, namespace, "--yes") == 0

    def deleted() -> list[str] | None:
        """Each object's first delete, in order: the session's controller, watching every
        namespace, may delete an object again (answered 404) after this one did."""
        found = requests_by([workloads[1]], {user}, since, {"delete"})
        names = list(dict.fromkeys(r.rsplit("/", 1)[1] for r in found if " configmaps/" in r))
        return names if len(names) == 2 else None

    assert wait_for(deleted, TIMEOUT) == [made["csi"], made["cni"]]


def test_without_a_leader_it_refuses_and_force_names_what_stays(
    control_plane: ControlPlane,
    mgmt: TestbedClient,
    workload_clients,
    workloads,
    namespace: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    kubeconfig = ready_to_lead(control_plane, mgmt, tmp_path)
    with leader(control_plane, namespace) as process:
        try:
            name = applied_delete_set(mgmt, workload_clients[0], workloads[0], namespace)
        except TimeoutError:
            print(process.log_tail(60))
            raise
    # The controller stopped (its Lease released): the finalizer stays on the CRS. The
    # suite's own controller (no Lease; every namespace) would still clean up after the
    # CRS once it is deleted: the Cluster, paused, is left alone by it, as by none.
    paused = {"metadata": {"annotations": {PAUSED_ANNOTATION: "true"}}}
    mgmt.patch_merge(CLUSTER_API, "Cluster", "un1", paused, namespace=namespace)
    assert FINALIZER in mgmt.get(CRS_API, KIND, "un", namespace)["metadata"]["finalizers"]
    capsys.readouterr()

    assert uninstall(kubeconfig, namespace, "--yes") == 2
    _, err = capsys.readouterr()
    assert "no controller holds the leader Lease crs-system/crs-controller" in err, err
    crs = mgmt.get(CRS_API, KIND, "un", namespace)
    assert crs is not None and "deletionTimestamp" not in crs["metadata"]

    assert uninstall(kubeconfig, namespace, "--yes", "--force") == 0
    out = capsys.readouterr().out
    wait_for(lambda: mgmt.get(CRS_API, KIND, "un", namespace) is None, TIMEOUT, message="CRS gone")
    assert f"removed the finalizer {FINALIZER} from 1" in out, out
    assert f"left behind by {namespace}/un: 1 object(s)" in out
    assert f"ClusterResourceSetBinding {namespace}/un1" in out
    assert f"v1 ConfigMap default/{name}" in out
    assert "field manager crs-controller" in out
    # What it said stays, stays: the object, and the binding's record of it.
    live = workload_clients[0].get("v1", "ConfigMap", name, "default")
    assert live is not None
    assert "crs-controller" in {m["manager"] for m in live["metadata"]["managedFields"]}
    entry = binding_entry(mgmt, namespace, "un1", "un")
    assert entry is not None
    assert [o["name"] for r in entry["resources"] for o in r["objects"]] == [name]
