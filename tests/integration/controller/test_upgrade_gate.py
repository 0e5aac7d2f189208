"""The upgrade gate (``spec.gateUpgrades``) on real servers: AfterControlPlaneUpgrade,
called over TLS as Cluster API calls it, holds a cluster's upgrade until the CRS has
applied the resources of the new version and (healthCheck.wait) they are Ready; a
standby replica (not the leader) answers alike, and BeforeWorkersUpgrade for the
version workers are about to take lets the workers go once it is all in place."""

from __future__ import annotations

import ssl
from typing import Any

import httpx

from crs_controller.testbed import TestbedClient, wait_for
from crs_controller.testbed.clusters import register_cluster, set_control_plane_version
from crs_controller.testbed.controller import ControllerProcess

from .support import (
    CLUSTER_API,
    HOOKS,
    TIMEOUT,
    WORKLOAD_USER,
    available,
    binding_entry,
    configmap_obj,
    crs_obj,
    deployment,
    manifests,
    source_configmap,
    unique,
    wait_object,
)


def upgrade_hook(controller: ControllerProcess, hook: str, request: dict[str, Any]) -> Any:
    """Call an upgrade hook of ``controller``'s Runtime Extension as Cluster API does."""
    context = ssl.create_default_context(cadata=controller.extension_ca_pem.decode())
    handler = {
        "AfterControlPlaneUpgrade": "aftercontrolplaneupgrade/after-control-plane-upgrade",
        "BeforeWorkersUpgrade": "beforeworkersupgrade/before-workers-upgrade",
    }[hook]
    body = {"apiVersion": HOOKS.strip("/"), "kind": f"{hook}Request", **request}
    response = httpx.post(
        controller.extension_url(f"{HOOKS}/{handler}"), json=body, verify=context, timeout=10
    )
    response.raise_for_status()
    return response.json()


def test_an_upgrade_waits_for_the_add_ons_of_the_new_version(
    controller: ControllerProcess,
    mgmt: TestbedClient,
    workload_clients,
    workloads,
    namespace: str,
    foreign_lease: None,
) -> None:
    old, new = unique("cpi-1-33"), unique("cpi-1-34")
    mgmt.create(source_configmap(namespace, "cpi-1-33", {"a": manifests(configmap_obj(old))}))
    mgmt.create(source_configmap(namespace, "cpi-1-34", {"a": manifests(deployment(new))}))
    crs = crs_obj(
        namespace,
        "cpi",
        [("ConfigMap", "cpi-1-33"), ("ConfigMap", "cpi-1-34")],
        {"cpi": "gated"},
        mode="Reconcile",
        deletionPolicy="Delete",
        gateUpgrades=True,
        healthCheck={"wait": True},
    )
    crs["spec"]["resources"][0]["kubernetesVersions"] = ">=1.33.0, <1.34.0"
    crs["spec"]["resources"][1]["kubernetesVersions"] = ">=1.34.0, <1.35.0"
    mgmt.create(crs)
    register_cluster(
        mgmt,
        workloads[0],
        name="gated",
        namespace=namespace,
        labels={"cpi": "gated"},
        kubeconfig_user=WORKLOAD_USER,
        kubeconfig_groups=("system:masters",),
        version="v1.33.2",
    )
    wl = workload_clients[0]
    wait_object(wl, "v1", "ConfigMap", old, "default")

    def cluster() -> dict[str, Any]:
        return mgmt.get(CLUSTER_API, "Cluster", "gated", namespace)

    def after_control_plane(process: ControllerProcess) -> Any:
        request = {"cluster": cluster(), "kubernetesVersion": "v1.34.0"}
        return upgrade_hook(process, "AfterControlPlaneUpgrade", request)

    with ControllerProcess(controller.management, "--leader-elect", extension=True) as standby:
        assert "became leader" not in standby.log_text()
        replicas = (controller, standby)

        # Before the control plane moves, nothing of 1.34 is there: held, by name.
        for process in replicas:
            answer = after_control_plane(process)
            assert answer["kind"] == "AfterControlPlaneUpgradeResponse"
            assert answer["status"] == "Success"
            assert answer["retryAfterSeconds"] > 0, answer
            assert "cpi" in answer["message"]

        set_control_plane_version(
            mgmt, name="gated", namespace=namespace, version="v1.34.0", desired="v1.34.0"
        )
        live = wait_object(wl, "apps/v1", "Deployment", new, "default")
        # Applied, not Ready (no Deployment controller runs on the workload server).
        wait_for(
            lambda: any(
                r["name"] == "cpi-1-34" and r.get("applied")
                for r in (binding_entry(mgmt, namespace, "gated", "cpi") or {}).get("resources", [])
            ),
            TIMEOUT,
            message="the 1.34 resource recorded applied",
        )
        for process in replicas:
            assert after_control_plane(process)["retryAfterSeconds"] > 0

        live["status"] = available(live)
        wl.update_status(live)
        wait_for(
            lambda: after_control_plane(controller)["retryAfterSeconds"] == 0,
            TIMEOUT,
            message="the leader lets the upgrade go on",
        )
        leader, other = after_control_plane(controller), after_control_plane(standby)
        assert other["retryAfterSeconds"] == 0, other
        assert other["message"] == leader["message"]
        assert "became leader" not in standby.log_text()

        workers = {
            "cluster": cluster(),
            "fromKubernetesVersion": "v1.33.2",
            "toKubernetesVersion": "v1.34.0",
            "workersUpgrades": [{"version": "v1.34.0"}],
        }
        for process in replicas:
            answer = upgrade_hook(process, "BeforeWorkersUpgrade", workers)
            assert answer["kind"] == "BeforeWorkersUpgradeResponse"
            assert answer["status"] == "Success"
            assert answer["retryAfterSeconds"] == 0, answer
