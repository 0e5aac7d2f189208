"""A shard set on real servers: three replicas (`run --shard`), each with a client
certificate of its own on the management server and its name in its User-Agent, and
60 clusters whose kubeconfigs each carry a user of their own, so the audit logs tell
which replica applied to which cluster.

Covered (the tests share one fleet; each first brings it to the replicas and the
content it starts from, so it also runs alone): every cluster is applied by exactly
one replica and the status counts all 60; every binding carries its Cluster's shard
bucket label, and one a tenant left without it, or with another value, is put right
by its owner; a replica killed with SIGKILL loses its
clusters to the others once its Lease expires, and an edit made right after reaches
all 60; the status is combined from one contribution per member, each for its own
clusters, and after the kill from the survivors' alone; a fourth replica takes only
the clusters that now hash to it; a deleted CRS keeps its finalizer until no
member's binding holds it, and its contributions are swept; restarting
every replica at once with everything converged writes nothing to any workload
cluster; a replica whose Lease is deleted lets go of its share at once and rejoins
with its next renewal; every replica's Runtime Extension gives the same
BeforeClusterDelete answer, whichever owns the Cluster.

The session's own controller is stopped meanwhile (it would act on these clusters
too) and started again afterwards.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import pytest

from crs_controller.core.api.models import SHARD_BUCKET_LABEL
from crs_controller.core.manifests.hashing import resource_hash
from crs_controller.core.membership.lease import LeaseRecord
from crs_controller.core.membership.shard import bucket_of, members_stamp, owner
from crs_controller.core.state.contribution import Contribution
from crs_controller.engine.io.contributions import (
    CONTRIBUTION_LABEL,
    CRS_ANNOTATION,
    DATA_KEY,
    MEMBER_ANNOTATION,
)
from crs_controller.engine.runtime.membership import MEMBER_LABEL
from crs_controller.testbed import ControlPlane, TestbedClient, wait_for
from crs_controller.testbed.controller import (
    SYSTEM_NAMESPACE,
    ControllerProcess,
    install_rbac,
)

from .support import (
    CLUSTER_API,
    CRS_API,
    HOLD,
    TIMEOUT,
    add_cluster,
    audit_caught_up,
    binding_entry,
    clear_leases,
    configmap_obj,
    crs_obj,
    hook,
    job,
    manifests,
    shard_metric,
    source_configmap,
    unique,
    wait_condition,
)

NAMESPACE = "shard-fleet"  # fixed: the split over replica-a/b/c is then known (24/21/15)
CLUSTERS = [f"c{i:02d}" for i in range(60)]
LEASE_SECONDS = 6
REPLICAS = ["replica-a", "replica-b", "replica-c", "replica-d"]
FIRST = REPLICAS[:3]  # the set the tests begin with
SURVIVORS = ["replica-a", "replica-c"]  # once replica-b is killed
GROWN = ["replica-a", "replica-c", "replica-d"]  # once replica-d joins them


def user_of(replica: str) -> str:
    return f"crs-shard-{replica}"


@dataclass
class Fleet:
    plane: ControlPlane
    mgmt: TestbedClient
    marker: str
    replicas: dict[str, ControllerProcess] = field(default_factory=dict)
    version: int = 1

    def start(self, name: str) -> ControllerProcess:
        process = ControllerProcess(
            self.plane.management,
            "--shard",
            "--lease-duration",
            f"{LEASE_SECONDS}s",
            "--log-level",
            "debug",
            # Other tests' clusters live in other namespaces: this fleet is all there
            # is for these replicas.
            "--namespace",
            NAMESPACE,
            user=user_of(name),
            env={"POD_NAME": name},
            extension=True,
        )
        process.start()
        self.replicas[name] = process
        return process

    def running(self, names: list[str]) -> None:
        """Exactly ``names`` running, each seeing the others: those missing started,
        any other stopped. A test that runs alone starts where the tests before it
        leave the fleet; after them it finds the fleet so already."""
        for name in [n for n in self.replicas if n not in names]:
            self.replicas.pop(name).close()
        for name in names:
            if name not in self.replicas:
                self.start(name)
        wait_for(lambda: settled(self, len(names)), TIMEOUT, message=f"members {names}")

    def converged(self) -> None:
        """The fleet's CRS exists, and every cluster is on its current content."""
        if self.mgmt.get(CRS_API, "ClusterResourceSet", "fleet", NAMESPACE) is None:
            self.mgmt.create(fleet_crs())
        current = resource_hash(self.mgmt.get("v1", "ConfigMap", "fleet", NAMESPACE))
        wait_for(
            lambda: all(entry_hash(self.mgmt, c) == current for c in CLUSTERS),
            TIMEOUT,
            message="every binding on the current content",
        )
        wait_condition(self.mgmt, NAMESPACE, "fleet", "Ready", "True", "Applied")

    def edit(self) -> float:
        """A new version of the CRS's one object; returns when it was made."""
        self.version += 1
        source = self.mgmt.get("v1", "ConfigMap", "fleet", NAMESPACE)
        source["data"] = {"a": manifests(configmap_obj(self.marker, v=str(self.version)))}
        edited = time.time()
        self.mgmt.update(source)
        return edited

    def close(self) -> None:
        for process in self.replicas.values():
            process.close()


def fleet_crs() -> dict[str, Any]:
    return crs_obj(NAMESPACE, "fleet", [("ConfigMap", "fleet")], {"fleet": "yes"}, mode="Reconcile")


def applies_by_cluster(plane: ControlPlane, since: float, marker: str) -> dict[str, list[str]]:
    """cluster -> the replicas that applied its object since ``since`` (workload audit
    logs: the user says which cluster, the User-Agent which replica)."""
    found: dict[str, list[str]] = defaultdict(list)
    for server in plane.workloads:
        for event in server.audit_events():
            user = event["user"]["username"]
            ref = event.get("objectRef", {})
            if event["verb"] != "patch" or ref.get("name") != marker:
                continue
            if not user.startswith("shard-cluster-"):
                continue
            stamp = datetime.fromisoformat(event["requestReceivedTimestamp"].replace("Z", "+00:00"))
            if stamp.timestamp() < since:
                continue
            agent = event.get("userAgent", "")
            replica = next((r for r in REPLICAS if f"shard member {r})" in agent), agent)
            found[user.removeprefix("shard-cluster-")].append(replica)
    return found


def workload_writes(plane: ControlPlane, since: float) -> list[str]:
    writes = []
    for server in plane.workloads:
        for event in server.audit_events():
            if "shard member" not in event.get("userAgent", ""):
                continue
            if event["verb"] in ("get", "list", "watch"):
                continue
            stamp = datetime.fromisoformat(event["requestReceivedTimestamp"].replace("Z", "+00:00"))
            if stamp.timestamp() >= since:
                ref = event.get("objectRef", {})
                what = f"{ref.get('resource')}/{ref.get('name')}"
                who = f"{event['user']['username']} {event.get('userAgent')}"
                writes.append(f"{server.name} {event['verb']} {what} at {stamp} by {who}")
    return writes


def entry_hash(mgmt: TestbedClient, cluster: str, crs: str = "fleet") -> str | None:
    entry = binding_entry(mgmt, NAMESPACE, cluster, crs) or {}
    resources = entry.get("resources") or [{}]
    return resources[0].get("hash") if resources[0].get("applied") else None


def fleet_status(mgmt: TestbedClient) -> dict[str, Any]:
    crs = mgmt.get(CRS_API, "ClusterResourceSet", "fleet", NAMESPACE)
    assert crs is not None
    status: dict[str, Any] = crs.get("status") or {}
    return status


def contributions(mgmt: TestbedClient, crs: str = "fleet") -> dict[str, Contribution]:
    """The members' contributions to the CRS ``crs`` of the fleet's namespace, by
    member, as the ConfigMaps beside the Leases hold them."""
    found = mgmt.list("v1", "ConfigMap", SYSTEM_NAMESPACE, label_selector=CONTRIBUTION_LABEL)
    by_member: dict[str, Contribution] = {}
    for item in found:
        annotations = item["metadata"].get("annotations") or {}
        if annotations.get(CRS_ANNOTATION) != f"{NAMESPACE}/{crs}":
            continue
        assert item["metadata"]["name"].startswith("crs-share-")
        member = annotations[MEMBER_ANNOTATION]
        assert member not in by_member, member  # one per (member, CRS)
        by_member[member] = Contribution.from_json(item["data"][DATA_KEY])
    return by_member


def stamp_of(mgmt: TestbedClient, members: list[str]) -> str:
    """The stamp of ``members`` in the incarnations their Leases carry now."""
    leases = mgmt.list("coordination.k8s.io/v1", "Lease", SYSTEM_NAMESPACE, MEMBER_LABEL)
    records = [LeaseRecord.parse(lease) for lease in leases]
    return members_stamp(members, {r.holder: r.incarnation for r in records if r.holder})


def combined_from(mgmt: TestbedClient, members: list[str]) -> bool:
    """Each of ``members`` contributes under their set, for its own clusters only,
    and together they count all 60 applied."""
    held, stamp = contributions(mgmt), stamp_of(mgmt, members)
    current = {m: c for m, c in held.items() if c.members == stamp}
    if sorted(current) != sorted(members):
        return False
    split = expected_split(members)
    return all(current[m].tally.applied == len(split[m]) for m in members)


def settled(fleet: Fleet, members: int) -> bool:
    """Every running replica sees ``members`` members."""
    return all(shard_metric(p, "crs_shard_members") == members for p in fleet.replicas.values())


def handed(process: ControllerProcess, direction: str) -> float:
    return shard_metric(process, f'crs_shard_handovers_total{{direction="{direction}"}}')


def owned(fleet: Fleet) -> dict[str, int]:
    return {
        name: int(shard_metric(p, "crs_shard_owned_clusters")) for name, p in fleet.replicas.items()
    }


def expected_split(members: list[str]) -> dict[str, set[str]]:
    split: dict[str, set[str]] = defaultdict(set)
    for cluster in CLUSTERS:
        split[str(owner(members, f"{NAMESPACE}/{cluster}"))].add(cluster)
    return split


@pytest.fixture(scope="module")
def fleet(
    controller: ControllerProcess, control_plane: ControlPlane, mgmt: TestbedClient
) -> Iterator[Fleet]:
    controller.stop()
    install_rbac(mgmt, users=[user_of(r) for r in REPLICAS])
    clear_leases(mgmt)
    mgmt.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
    marker = unique("fleet")
    mgmt.create(
        source_configmap(NAMESPACE, "fleet", {"a": manifests(configmap_obj(marker, v="1"))})
    )
    for i, name in enumerate(CLUSTERS):
        workload = control_plane.workloads[i % len(control_plane.workloads)]
        add_cluster(mgmt, workload, NAMESPACE, name, {"fleet": "yes"}, user=f"shard-cluster-{name}")
    state = Fleet(control_plane, mgmt, marker)
    try:
        yield state
    finally:
        state.close()
        clear_leases(mgmt)
        controller.start()


def test_every_cluster_is_applied_by_exactly_one_replica(fleet: Fleet, mgmt: TestbedClient) -> None:
    started = time.time() - 1
    fleet.running(FIRST)
    mgmt.create(fleet_crs())
    wait_for(lambda: all(entry_hash(mgmt, c) for c in CLUSTERS), TIMEOUT, message="60 bindings")
    wait_condition(mgmt, NAMESPACE, "fleet", "Ready", "True", "Applied")
    crs = mgmt.get(CRS_API, "ClusterResourceSet", "fleet", NAMESPACE)
    assert (crs["status"]["matchingClusters"], crs["status"]["appliedClusters"]) == (60, 60)
    # Counted from the members' contributions: one each, each for its own clusters.
    wait_for(lambda: combined_from(mgmt, FIRST), TIMEOUT, message="three contributions")
    assert sorted(contributions(mgmt)) == FIRST

    split = expected_split(FIRST)
    assert all(10 <= len(split[r]) <= 30 for r in FIRST), split
    assert owned(fleet) == {r: len(split[r]) for r in FIRST}
    applied = applies_by_cluster(fleet.plane, started, fleet.marker)
    assert sorted(applied) == CLUSTERS
    for cluster, replicas in applied.items():
        assert replicas == [str(owner(FIRST, f"{NAMESPACE}/{cluster}"))], cluster


def bucket_labels(mgmt: TestbedClient) -> dict[str, str | None]:
    bindings = mgmt.list(CRS_API, "ClusterResourceSetBinding", NAMESPACE)
    return {
        b["metadata"]["name"]: (b["metadata"].get("labels") or {}).get(SHARD_BUCKET_LABEL)
        for b in bindings
    }


def test_every_binding_carries_its_bucket_and_its_owner_puts_a_wrong_one_right(
    fleet: Fleet, mgmt: TestbedClient
) -> None:
    fleet.running(FIRST)
    fleet.converged()
    right = {cluster: str(bucket_of(NAMESPACE, cluster)) for cluster in CLUSTERS}
    assert bucket_labels(mgmt) == right
    wrong = {CLUSTERS[0]: None, CLUSTERS[1]: "not-a-number", CLUSTERS[2]: "1023"}
    if right[CLUSTERS[2]] == "1023":
        wrong[CLUSTERS[2]] = "0"
    for cluster, value in wrong.items():
        patch = {"metadata": {"labels": {SHARD_BUCKET_LABEL: value}}}
        kind = "ClusterResourceSetBinding"
        mgmt.patch_merge(CRS_API, kind, cluster, patch, namespace=NAMESPACE)
    wait_for(lambda: bucket_labels(mgmt) == right, TIMEOUT, message="the labels put right")


def test_a_killed_replica_loses_its_clusters_once_its_lease_expires(
    fleet: Fleet, mgmt: TestbedClient
) -> None:
    fleet.running(FIRST)
    fleet.converged()
    share = expected_split(FIRST)["replica-b"]
    taken = {name: handed(fleet.replicas[name], "in") for name in SURVIVORS}
    first = stamp_of(mgmt, FIRST)
    fleet.replicas.pop("replica-b").kill()
    edited = fleet.edit()
    wait_for(
        lambda: len(applies_by_cluster(fleet.plane, edited, fleet.marker)) == len(CLUSTERS),
        TIMEOUT,
        message="the edit applied to all 60 clusters",
    )
    wait_for(lambda: settled(fleet, 2), TIMEOUT, message="two members")
    # replica-b's clusters went to the survivors once its Lease expired, and only
    # those: each survivor kept its own and took the ones that now hash to it.
    for name in SURVIVORS:
        mine = sum(owner(SURVIVORS, f"{NAMESPACE}/{c}") == name for c in share)
        assert handed(fleet.replicas[name], "in") - taken[name] == mine, name
    # No binding entry lost, and the status counts all 60 again.
    wait_for(lambda: all(entry_hash(mgmt, c) for c in CLUSTERS), TIMEOUT)
    wait_condition(mgmt, NAMESPACE, "fleet", "Ready", "True", "Applied")
    # The survivors contribute under their own set, which leaves replica-b's out
    # (made under the set it was in, until the leader sweeps it).
    wait_for(lambda: combined_from(mgmt, SURVIVORS), TIMEOUT, message="the survivors' shares")
    killed = contributions(mgmt).get("replica-b")
    assert killed is None or killed.members == first
    crs = mgmt.get(CRS_API, "ClusterResourceSet", "fleet", NAMESPACE)
    assert crs["status"]["appliedClusters"] == 60

    # Settled: the next edit reaches each cluster from exactly one replica.
    edited = fleet.edit()
    wait_for(
        lambda: len(applies_by_cluster(fleet.plane, edited, fleet.marker)) == 60,
        TIMEOUT,
        message="the second edit on all 60 clusters",
    )
    for cluster, replicas in applies_by_cluster(fleet.plane, edited, fleet.marker).items():
        assert replicas == [str(owner(SURVIVORS, f"{NAMESPACE}/{cluster}"))], cluster


def test_a_fourth_replica_takes_only_the_clusters_that_now_hash_to_it(
    fleet: Fleet, mgmt: TestbedClient
) -> None:
    before, after = SURVIVORS, GROWN
    fleet.running(before)
    fleet.converged()
    handovers = {
        (name, direction): handed(fleet.replicas[name], direction)
        for name in before
        for direction in ("in", "out")
    }
    fleet.start("replica-d")
    # After the test before, replica-b's Lease is still there (SIGKILL): the newcomer
    # counts it out once it has seen it silent for a lease duration.
    wait_for(lambda: settled(fleet, 3), TIMEOUT, message="three members again")
    split = expected_split(after)
    assert owned(fleet) == {r: len(split[r]) for r in after}
    for name in before:
        moved = sum(owner(before, f"{NAMESPACE}/{c}") == name for c in split["replica-d"])
        assert handed(fleet.replicas[name], "out") - handovers[(name, "out")] == moved, name
        # Nothing moved between the two that were there.
        assert handed(fleet.replicas[name], "in") == handovers[(name, "in")], name
    before_edit = fleet_status(mgmt).get("revision")
    edited = fleet.edit()
    wait_for(
        lambda: len(applies_by_cluster(fleet.plane, edited, fleet.marker)) == 60,
        TIMEOUT,
        message="the edit on all 60 clusters",
    )
    for cluster, replicas in applies_by_cluster(fleet.plane, edited, fleet.marker).items():
        assert replicas == [str(owner(after, f"{NAMESPACE}/{cluster}"))], cluster
    # The leader holds whole bindings only for its own share, summaries for the rest:
    # the status it folds from them counts every cluster on the edit's revision.
    wait_for(
        lambda: fleet_status(mgmt).get("revision") not in (None, before_edit),
        TIMEOUT,
        message="the status on the edit's revision",
    )
    wait_condition(mgmt, NAMESPACE, "fleet", "Ready", "True", "Applied")
    status = fleet_status(mgmt)
    assert (status["matchingClusters"], status["appliedClusters"]) == (60, 60)
    assert status["failedClusters"] == 0


def test_a_deleted_crs_keeps_its_finalizer_until_every_members_bindings_let_go(
    fleet: Fleet, mgmt: TestbedClient
) -> None:
    fleet.running(GROWN)
    fleet.converged()
    if mgmt.get("v1", "ConfigMap", "gone", NAMESPACE) is None:
        objects = {"a": manifests(configmap_obj(unique("gone")))}
        mgmt.create(source_configmap(NAMESPACE, "gone", objects))
    mgmt.create(crs_obj(NAMESPACE, "gone", [("ConfigMap", "gone")], {"fleet": "yes"}))
    wait_condition(mgmt, NAMESPACE, "gone", "Ready", "True", "Applied")
    status = mgmt.get(CRS_API, "ClusterResourceSet", "gone", NAMESPACE)["status"]
    assert (status["matchingClusters"], status["appliedClusters"]) == (60, 60)
    assert sorted(contributions(mgmt, "gone")) == GROWN
    mgmt.delete(CRS_API, "ClusterResourceSet", "gone", NAMESPACE)
    wait_for(
        lambda: mgmt.get(CRS_API, "ClusterResourceSet", "gone", NAMESPACE) is None,
        TIMEOUT,
        message="the deleted CRS gone",
    )
    # Gone only once no member's binding held it any more.
    assert all(binding_entry(mgmt, NAMESPACE, c, "gone") is None for c in CLUSTERS)
    # And the leader sweeps the contributions of a CRS it no longer knows.
    wait_for(lambda: not contributions(mgmt, "gone"), TIMEOUT, message="its shares swept")


def test_restarting_every_replica_at_once_writes_nothing_to_workload_clusters(
    fleet: Fleet, mgmt: TestbedClient
) -> None:
    fleet.running(GROWN)
    fleet.converged()
    for process in fleet.replicas.values():
        process.stop()
    restarted = time.time()  # all stopped: any write from now on is a new process's
    for process in fleet.replicas.values():
        process.start(wait_ready=False)
    wait_for(lambda: settled(fleet, 3), TIMEOUT, message="three members after the restart")

    def reconciled(process: ControllerProcess) -> bool:
        done = shard_metric(process, 'crs_reconciles_total{kind="cluster",result="ok"}')
        return done >= shard_metric(process, "crs_shard_owned_clusters") > 0

    # The positive sign: each replica has reconciled as many clusters as it owns.
    wait_for(
        lambda: all(reconciled(p) for p in fleet.replicas.values()),
        TIMEOUT,
        message="every replica looked at its clusters",
    )
    audit_caught_up(fleet.plane.workloads)
    assert workload_writes(fleet.plane, restarted) == []
    wait_condition(mgmt, NAMESPACE, "fleet", "Ready", "True", "Applied")


def test_a_replica_whose_lease_is_deleted_stops_acting_at_once_then_rejoins(
    fleet: Fleet, mgmt: TestbedClient
) -> None:
    fleet.running(GROWN)
    members = sorted(fleet.replicas)
    victim = fleet.replicas[members[0]]
    share = shard_metric(victim, "crs_shard_owned_clusters")
    out = handed(victim, "out")
    lease = f"crs-controller-shard-{members[0]}"
    mgmt.delete("coordination.k8s.io/v1", "Lease", lease, SYSTEM_NAMESPACE)
    # It let go of its whole share (the others count it out at the same moment)...
    wait_for(lambda: handed(victim, "out") >= out + share, TIMEOUT, message="its share let go")
    # ...and once its next renewal has recreated the Lease, it is a member again.
    wait_for(lambda: settled(fleet, len(members)), TIMEOUT, message="rejoined")
    assert owned(fleet) == {r: len(c) for r, c in expected_split(members).items()}


def test_every_replica_answers_the_before_cluster_delete_hook_alike(
    fleet: Fleet, mgmt: TestbedClient
) -> None:
    fleet.running(GROWN)
    held = unique("held")
    mgmt.create(source_configmap(NAMESPACE, "held", {"a": manifests(configmap_obj(held))}))
    mgmt.create(source_configmap(NAMESPACE, "drain", {"a": manifests(job(unique("drain")))}))
    crs = crs_obj(NAMESPACE, "held", [("ConfigMap", "held")], {"held": "yes"}, mode="Reconcile")
    # The drain Job never completes (no Job controller here): cleanup stays pending.
    crs["spec"]["uninstall"] = {
        "ensure": True,
        "beforeDelete": [{"kind": "ConfigMap", "name": "drain"}],
    }
    mgmt.create(crs)
    last = CLUSTERS[-1]
    hold = {"metadata": {"labels": {"held": "yes"}, "finalizers": [HOLD]}}
    mgmt.patch_merge(CLUSTER_API, "Cluster", last, hold, namespace=NAMESPACE)
    wait_for(
        lambda: (
            ((binding_entry(mgmt, NAMESPACE, last, "held") or {}).get("outcome") or {}).get(
                "reason"
            )
            == "Applied"
        ),
        TIMEOUT,
        message="the held CRS applied",
    )
    try:
        mgmt.delete(CLUSTER_API, "Cluster", last, NAMESPACE)
        cluster = mgmt.get(CLUSTER_API, "Cluster", last, NAMESPACE)
        answers = {name: hook(p, cluster) for name, p in fleet.replicas.items()}
        owner_of = owner(list(fleet.replicas), f"{NAMESPACE}/{last}")
        assert {a["retryAfterSeconds"] > 0 for a in answers.values()} == {True}, (owner_of, answers)
        assert len({a["message"] for a in answers.values()}) == 1, answers
    finally:
        release = {"metadata": {"finalizers": None}}
        mgmt.patch_merge(CLUSTER_API, "Cluster", last, release, namespace=NAMESPACE)
