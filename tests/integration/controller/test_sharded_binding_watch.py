"""A shard set whose members watch only their own share's bindings (by the label
``addons.crs.dev/shard-bucket``), on real servers: each replica holds the bindings of
the Clusters it owns and no other (``crs_shard_cached_bindings`` equals
``crs_shard_owned_clusters``); a binding left without its label is held by its owner
and labelled; a fourth replica joining and a SIGKILL hand-over leave each replica
with its new share's bindings only. The CRS status is not asserted here (it is to
come from the members' contributions).

The session's own controller is stopped meanwhile and started again afterwards.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from crs_controller.core.api.models import SHARD_BUCKET_LABEL
from crs_controller.core.membership.shard import bucket_of
from crs_controller.testbed import ControlPlane, TestbedClient, wait_for
from crs_controller.testbed.controller import ControllerProcess, install_rbac

from .support import (
    CRS_API,
    TIMEOUT,
    add_cluster,
    binding_entry,
    clear_leases,
    configmap_obj,
    crs_obj,
    manifests,
    shard_metric,
    source_configmap,
    unique,
)

NAMESPACE = "shard-watch"
CLUSTERS = [f"w{i:02d}" for i in range(24)]
REPLICAS = ["watch-a", "watch-b", "watch-c", "watch-d"]
LEASE_SECONDS = 6


def start(plane: ControlPlane, name: str) -> ControllerProcess:
    process = ControllerProcess(
        plane.management,
        "--shard",
        "--lease-duration",
        f"{LEASE_SECONDS}s",
        "--namespace",
        NAMESPACE,
        user=f"crs-shard-{name}",
        env={"POD_NAME": name},
    )
    process.start()
    return process


@pytest.fixture(scope="module")
def replicas(
    controller: ControllerProcess, control_plane: ControlPlane, mgmt: TestbedClient
) -> Iterator[dict[str, ControllerProcess]]:
    controller.stop()
    install_rbac(mgmt, users=[f"crs-shard-{r}" for r in REPLICAS])
    clear_leases(mgmt)
    mgmt.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
    source = {"a": manifests(configmap_obj(unique("watch")))}
    mgmt.create(source_configmap(NAMESPACE, "watch", source))
    for i, name in enumerate(CLUSTERS):
        workload = control_plane.workloads[i % len(control_plane.workloads)]
        add_cluster(mgmt, workload, NAMESPACE, name, {"watch": "yes"})
    running = {name: start(control_plane, name) for name in REPLICAS[:3]}
    try:
        yield running
    finally:
        for process in running.values():
            process.close()
        clear_leases(mgmt)
        controller.start()


def holds_only_its_share(running: dict[str, ControllerProcess], members: int) -> bool:
    counts = [
        (
            shard_metric(p, "crs_shard_members"),
            shard_metric(p, "crs_shard_cached_bindings"),
            shard_metric(p, "crs_shard_owned_clusters"),
        )
        for p in running.values()
    ]
    total = sum(owned for _, _, owned in counts)
    return total == len(CLUSTERS) and all(
        m == members and cached == owned for m, cached, owned in counts
    )


def all_bound(mgmt: TestbedClient) -> bool:
    return all(binding_entry(mgmt, NAMESPACE, c, "watch") for c in CLUSTERS)


def test_each_replica_holds_only_its_own_shares_bindings(
    replicas: dict[str, ControllerProcess], mgmt: TestbedClient
) -> None:
    crs = crs_obj(NAMESPACE, "watch", [("ConfigMap", "watch")], {"watch": "yes"})
    mgmt.create(crs)
    wait_for(lambda: all_bound(mgmt), TIMEOUT, message="every cluster bound")
    wait_for(lambda: holds_only_its_share(replicas, 3), TIMEOUT, message="shares only")


def test_a_binding_without_its_label_is_held_and_labelled_by_its_owner(
    replicas: dict[str, ControllerProcess], mgmt: TestbedClient
) -> None:
    wait_for(lambda: all_bound(mgmt), TIMEOUT, message="every cluster bound")
    name = CLUSTERS[0]
    kind = "ClusterResourceSetBinding"
    patch = {"metadata": {"labels": {SHARD_BUCKET_LABEL: None}}}
    mgmt.patch_merge(CRS_API, kind, name, patch, namespace=NAMESPACE)

    def labelled() -> bool:
        binding = mgmt.get(CRS_API, kind, name, NAMESPACE) or {}
        labels = (binding.get("metadata") or {}).get("labels") or {}
        return labels.get(SHARD_BUCKET_LABEL) == str(bucket_of(NAMESPACE, name))

    wait_for(labelled, TIMEOUT, message="the label put back")
    wait_for(lambda: holds_only_its_share(replicas, 3), TIMEOUT, message="shares only")


def test_a_fourth_replica_and_a_killed_one_leave_each_with_its_new_share_only(
    replicas: dict[str, ControllerProcess], control_plane: ControlPlane, mgmt: TestbedClient
) -> None:
    replicas[REPLICAS[3]] = start(control_plane, REPLICAS[3])
    wait_for(lambda: holds_only_its_share(replicas, 4), TIMEOUT, message="four shares")
    replicas.pop(REPLICAS[1]).kill()
    # Counted out once its Lease has been seen unchanged for the lease duration.
    wait_for(lambda: holds_only_its_share(replicas, 3), TIMEOUT, message="three shares again")
    assert all_bound(mgmt)
