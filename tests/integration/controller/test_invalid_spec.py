"""A ClusterResourceSet the controller's model refuses — stored through a looser CRD
schema, as after a CRD downgrade or a hand-edited schema — gets ``InvalidSpec`` on its
own status, naming the field and not the value, while another CRS on the same cluster
converges as usual."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import pytest

from crs_controller.testbed import KubeError, TestbedClient, wait_for
from crs_controller.testbed.controller import ControllerProcess

from .support import (
    TIMEOUT,
    add_cluster,
    configmap_obj,
    crs_obj,
    manifests,
    source_configmap,
    unique,
    wait_condition,
    wait_object,
)

CRD = "clusterresourcesets.addons.crs.dev"
CRD_API = "apiextensions.k8s.io/v1"


@pytest.fixture
def loose_mode(mgmt: TestbedClient) -> Iterator[None]:
    """The CRS CRD without the enum on spec.mode, restored afterwards."""
    original = mgmt.get(CRD_API, "CustomResourceDefinition", CRD)
    assert original is not None
    loose = copy.deepcopy(original)
    for version in loose["spec"]["versions"]:
        mode = version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["mode"]
        mode.pop("enum", None)
    mgmt.update(loose)
    yield
    current = mgmt.get(CRD_API, "CustomResourceDefinition", CRD)
    assert current is not None
    original["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
    mgmt.update(original)


def test_a_crs_the_model_refuses_is_invalid_alone(
    controller: ControllerProcess,
    mgmt: TestbedClient,
    workloads,
    workload_clients,
    namespace: str,
    loose_mode: None,
) -> None:
    good, bad = unique("good"), unique("bad")
    mgmt.create(source_configmap(namespace, "good", {"a": manifests(configmap_obj(good))}))
    mgmt.create(source_configmap(namespace, "bad", {"a": manifests(configmap_obj(bad))}))
    marker = "Sometimes" + unique("x")
    invalid = crs_obj(namespace, "bad", [("ConfigMap", "bad")], {"iv": "1"}, mode=marker)

    def create_invalid() -> dict[str, Any] | None:
        try:  # the looser schema takes a moment to be served
            return mgmt.create(invalid)
        except KubeError as exc:
            if exc.status != 422:
                raise
            return None

    wait_for(create_invalid, TIMEOUT, message="CRS created through the looser schema")
    mgmt.create(crs_obj(namespace, "good", [("ConfigMap", "good")], {"iv": "1"}))
    add_cluster(mgmt, workloads[2], namespace, "iv1", {"iv": "1"})

    cond = wait_condition(mgmt, namespace, "bad", "Ready", "False", "InvalidSpec")
    assert "spec.mode" in cond["message"], cond["message"]
    assert marker not in cond["message"]
    wait_condition(mgmt, namespace, "good", "Ready", "True", "Applied")
    wait_object(workload_clients[2], "v1", "ConfigMap", good, "default")
    assert workload_clients[2].get("v1", "ConfigMap", bad, "default") is None
