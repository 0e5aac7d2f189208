"""Real add-on manifests on a real workload server: Calico (710 KB, 23 CRDs with CEL
validations) plus a custom resource that needs one of them, and kindnet, the CNI that
Cluster API's own e2e tests deliver with a ClusterResourceSet."""

from __future__ import annotations

import yaml

from crs_controller.core.manifests.documents import parse_objects
from crs_controller.testbed import TestbedClient, wait_for
from crs_controller.testbed.controller import ControllerProcess
from tests.addons import ADDONS, needs_addons

from .support import (
    TIMEOUT,
    add_cluster,
    binding_entry,
    crs_obj,
    source_configmap,
    wait_condition,
)

IPPOOL = {
    "apiVersion": "crd.projectcalico.org/v1",
    "kind": "IPPool",
    "metadata": {"name": "crs-test-pool"},
    "spec": {"cidr": "10.244.0.0/16", "ipipMode": "Never", "natOutgoing": True},
}


@needs_addons
def test_calico_and_kindnet_are_applied_crds_first(
    controller: ControllerProcess, mgmt: TestbedClient, workload_clients, workloads, namespace: str
) -> None:
    calico = (ADDONS / "calico.yaml").read_text()
    # "0-..." sorts before "calico.yaml": the custom resource comes first in the
    # source, and only the safe apply order makes it work.
    data = {"0-ippool.yaml": yaml.safe_dump(IPPOOL), "calico.yaml": calico}
    mgmt.create(source_configmap(namespace, "calico", data))
    kindnet = {"kindnet.yaml": (ADDONS / "kindnet.yaml").read_text()}
    mgmt.create(source_configmap(namespace, "kindnet", kindnet))
    resources = [("ConfigMap", "calico"), ("ConfigMap", "kindnet")]
    mgmt.create(crs_obj(namespace, "cni", resources, {"cni": "real"}, mode="Reconcile"))
    add_cluster(mgmt, workloads[2], namespace, "cni-1", {"cni": "real"})

    wait_condition(mgmt, namespace, "cni", "Ready", "True", "Applied")
    entry = wait_for(lambda: binding_entry(mgmt, namespace, "cni-1", "cni"), TIMEOUT)
    by_name = {r["name"]: r for r in entry["resources"]}
    expected = parse_objects(source_configmap(namespace, "calico", data))
    assert len(by_name["calico"]["objects"]) == len(expected)
    crds = [o for o in by_name["calico"]["objects"] if o["kind"] == "CustomResourceDefinition"]
    assert len(crds) == 23

    wl = workload_clients[2]
    pool = wl.get("crd.projectcalico.org/v1", "IPPool", "crs-test-pool")
    assert pool is not None and pool["spec"]["cidr"] == "10.244.0.0/16"
    assert wl.get("apps/v1", "DaemonSet", "calico-node", "kube-system") is not None
    assert wl.get("apps/v1", "DaemonSet", "kindnet", "kube-system") is not None
