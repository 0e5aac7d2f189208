"""Notifications from a shard set on real servers: two replicas (`run --shard`) notify
one local receiver. A step's validation fails on a cluster the replica that is not
the leader owns: its ValidationFailed arrives exactly once (sent by that owner; the
leader never runs that cluster's pass), and the rollout's halt, the leader's to tell,
arrives once too.

The session's controller is stopped meanwhile (it would act on these clusters too)
and started again afterwards.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from crs_controller.core.membership.shard import owner
from crs_controller.testbed import ControlPlane, TestbedClient, wait_for
from crs_controller.testbed.controller import ControllerProcess

from .support import (
    TIMEOUT,
    add_cluster,
    clear_leases,
    configmap_obj,
    crs_obj,
    job,
    manifests,
    shard_metric,
    source_configmap,
    unique,
)
from .test_notifications import Receiver

REPLICAS = ["notify-a", "notify-b"]


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    made = Receiver()
    try:
        yield made
    finally:
        made.close()


@pytest.fixture
def shard_set(
    controller: ControllerProcess,
    control_plane: ControlPlane,
    mgmt: TestbedClient,
    receiver: Receiver,
    namespace: str,
) -> Iterator[dict[str, ControllerProcess]]:
    """Two members of a shard set for ``namespace``, each notifying ``receiver``,
    once each sees the other and one holds the leader Lease."""
    controller.stop()
    clear_leases(mgmt)
    replicas: dict[str, ControllerProcess] = {}
    try:
        for name in REPLICAS:
            args = ("--shard", "--lease-duration", "6s", "--log-level", "debug")
            process = ControllerProcess(
                control_plane.management,
                *args,
                *("--namespace", namespace, "--notify-url", receiver.url),
                env={"POD_NAME": name},
            )
            replicas[name] = process
            process.start()

        def settled() -> bool:
            members = [shard_metric(p, "crs_shard_members") for p in replicas.values()]
            leaders = [shard_metric(p, "crs_leader") for p in replicas.values()]
            return members == [2, 2] and sorted(leaders) == [0, 1]

        wait_for(settled, TIMEOUT, message="two members, one leader")
        yield replicas
    finally:
        for process in replicas.values():
            process.close()
        clear_leases(mgmt)
        controller.start()


def test_a_validation_failed_on_a_followers_cluster_is_told_once(
    shard_set: dict[str, ControllerProcess],
    control_plane: ControlPlane,
    mgmt: TestbedClient,
    receiver: Receiver,
    namespace: str,
) -> None:
    follower = next(n for n, p in shard_set.items() if shard_metric(p, "crs_leader") == 0)
    # A cluster name the follower owns.
    cluster = next(
        name
        for name in (f"v{i}" for i in range(100))
        if owner(REPLICAS, f"{namespace}/{name}") == follower
    )
    labels = {"told": namespace[-6:]}
    add_cluster(mgmt, control_plane.workloads[0], namespace, cluster, labels)
    app = manifests(configmap_obj(unique("app"), v="1"))
    mgmt.create(source_configmap(namespace, "app", {"a": app}))
    # The workload servers run no Job controller: the Job never completes.
    mgmt.create(source_configmap(namespace, "smoke", {"job": manifests(job(unique("smoke")))}))
    crs = crs_obj(namespace, "app", [("ConfigMap", "app")], labels, mode="Reconcile")
    validation = {"resources": [{"kind": "ConfigMap", "name": "smoke"}], "timeout": "3s"}
    crs["spec"]["rollout"] = {
        "steps": [{"clusterSelector": {"matchLabels": labels}, "validation": validation}]
    }
    mgmt.create(crs)

    subject = f"{namespace}/app"
    wait_for(
        lambda: receiver.about(subject, "dev.crs.validationfailed"),
        TIMEOUT,
        message="the ValidationFailed POST",
    )
    # The positive sign that the leader has told what it had to: the halt that
    # follows the failure.
    wait_for(
        lambda: receiver.about(subject, "dev.crs.rollouthalted"),
        TIMEOUT,
        message="the RolloutHalted POST",
    )
    (told,) = receiver.about(subject, "dev.crs.validationfailed")
    assert told["data"]["clusters"] == [cluster]
    assert len(receiver.about(subject, "dev.crs.rollouthalted")) == 1
