"""The fleet-wide budget on real servers: ``run --max-updating-clusters 1``.

Two CRSs (Reconcile, ``healthCheck.wait``) each put a Deployment of their own on
three clusters; the workload servers run no controllers, so a Deployment is Ready only
once the test writes its status. Both sources are edited: at every look at the
bindings at most one cluster is updating (applied on the new revision, not Ready yet),
and it holds one place for both CRSs (neither is ``BudgetExhausted`` there); the
others wait with ``BudgetExhausted`` and ``crs_updating_clusters`` reads 1. Making
the updating cluster Ready lets the next one go, one at a time, until all three are
Ready on the new revision and the gauge reads 0. A cluster added while the budget is
full gets both CRSs at once: a first install is neither held nor counted.

Readiness is the test's to give, so a cluster stays "updating" until the test ends
it: two clusters updating at once could not slip between two looks.

The process under test watches only this test's namespace, so no other test's
cluster takes a place in its budget. The session's controller watches every
namespace with no limit and would update these clusters all at once beside it: it is
stopped for this test and started again afterwards, as the sharding tests do.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from crs_controller.testbed import ControlPlane, TestbedClient, wait_for
from crs_controller.testbed.controller import ControllerProcess

from .support import (
    TIMEOUT,
    add_cluster,
    available,
    binding,
    binding_entry,
    crs_obj,
    deployment,
    manifests,
    metric,
    source_configmap,
    unique,
    until_no_conflict,
    wait_condition,
    wait_object,
)

Obj = dict[str, Any]
CRSS = ("web", "api")
CLUSTERS = ("u1", "u2", "u3")  # one per workload server
LATE = "u4"  # added while the budget is full; shares u1's server


@pytest.fixture
def budget_of_one(controller: ControllerProcess, namespace: str) -> Iterator[ControllerProcess]:
    controller.stop()
    try:
        args = ("--max-updating-clusters", "1", "--namespace", namespace, "--log-level", "debug")
        with ControllerProcess(controller.management, *args) as process:
            yield process
    finally:
        controller.start()


class Fleet:
    """The test's clusters and Deployments, and what their bindings say. Every look
    at the bindings checks the budget."""

    def __init__(
        self,
        process: ControllerProcess,
        mgmt: TestbedClient,
        plane: ControlPlane,
        clients: list[TestbedClient],
        namespace: str,
    ) -> None:
        self.process, self.mgmt, self.plane = process, mgmt, plane
        self.clients, self.ns = clients, namespace
        self.marker = unique("budget")
        self.server: dict[str, int] = {}  # cluster -> index of its workload server
        self.before: dict[tuple[str, str], str] = {}  # (cluster, crs) -> hash before the edit
        self.admitted: list[str] = []  # clusters in the order they were seen updating

    def source(self, crs: str, image: str) -> Obj:
        # ${CLUSTER_NAME}: u4 shares u1's server, and gets Deployments of its own.
        app = deployment(f"{self.marker}-{crs}-${{CLUSTER_NAME}}")
        app["spec"]["template"]["spec"]["containers"][0]["image"] = image
        return source_configmap(self.ns, crs, {"a": manifests(app)})

    def edit(self, crs: str, image: str) -> None:
        def change() -> None:
            live = self.mgmt.get("v1", "ConfigMap", crs, self.ns)
            assert live is not None
            live["data"] = self.source(crs, image)["data"]
            self.mgmt.update(live)

        until_no_conflict(change)

    def add(self, cluster: str, index: int) -> None:
        self.server[cluster] = index % len(self.plane.workloads)
        workload = self.plane.workloads[self.server[cluster]]
        add_cluster(self.mgmt, workload, self.ns, cluster, {"budget": self.ns[-6:]})

    def make_ready(self, cluster: str) -> None:
        """Write the status a Deployment controller would to each of the cluster's
        Deployments, at the generation it has now."""
        client = self.clients[self.server[cluster]]
        for crs in CRSS:
            name = f"{self.marker}-{crs}-{cluster}"
            wait_object(client, "apps/v1", "Deployment", name, "default")

            def mark(name: str = name) -> None:
                live = client.get("apps/v1", "Deployment", name, "default")
                assert live is not None
                live["status"] = available(live)
                client.update_status(live)

            until_no_conflict(mark)

    def hash(self, cluster: str, crs: str, entry: Obj | None = None) -> str | None:
        if entry is None:
            entry = binding_entry(self.mgmt, self.ns, cluster, crs) or {}
        resources = entry.get("resources") or [{}]
        return resources[0].get("hash") if resources[0].get("applied") else None

    def state(self, cluster: str, crs: str, entries: dict[str, Obj]) -> str:
        """held (BudgetExhausted); updating (Applied on the new revision, not Ready);
        done (Ready on the new revision, or on its first install); installing (a first
        install, not Ready); old (Ready on the revision before the edit); other.
        ``entries``: the cluster's binding entries, read once for all its CRSs (two
        reads could straddle a binding write and mix two passes)."""
        entry = entries.get(crs) or {}
        outcome = entry.get("outcome") or {}
        on, before = self.hash(cluster, crs, entry), self.before.get((cluster, crs))
        if outcome.get("reason") == "BudgetExhausted":
            return "held"
        if outcome.get("reason") != "Applied" or on is None:
            return "other"
        if outcome.get("ready") is False:
            return "installing" if before is None else "updating" if on != before else "other"
        return "old" if on == before else "done"

    def look(self) -> dict[str, dict[str, str]]:
        seen = {}
        for cluster in self.server:
            recorded = (binding(self.mgmt, self.ns, cluster) or {}).get("spec") or {}
            entries = {e["clusterResourceSetName"]: e for e in recorded.get("bindings") or []}
            seen[cluster] = {crs: self.state(cluster, crs, entries) for crs in CRSS}
        updating = [c for c, states in seen.items() if "updating" in states.values()]
        assert len(updating) <= 1, seen
        for cluster in updating:
            # One place per cluster, whatever the number of CRSs it updates.
            assert "held" not in seen[cluster].values(), seen
            if cluster not in self.admitted:
                self.admitted.append(cluster)
        # A first install never waits for the budget.
        assert "held" not in seen.get(LATE, {}).values(), seen
        return seen

    def next_updating(self, after: int) -> str | None:
        """The cluster updating both CRSs, admitted after the first ``after`` ones, once
        every other original cluster waits for the budget or is done."""
        seen = self.look()
        updating = [c for c in CLUSTERS if set(seen[c].values()) == {"updating"}]
        if len(updating) != 1 or updating[0] in self.admitted[:after]:
            return None
        rest = [set(seen[c].values()) for c in CLUSTERS if c != updating[0]]
        return updating[0] if all(s <= {"held", "done"} for s in rest) else None

    def gauge(self) -> float:
        text = httpx.get(self.process.url("/metrics"), timeout=5).text
        return metric(text, "crs_updating_clusters")


def test_at_most_one_cluster_takes_a_new_revision_at_once(
    budget_of_one: ControllerProcess,
    control_plane: ControlPlane,
    mgmt: TestbedClient,
    workload_clients,
    namespace: str,
) -> None:
    fleet = Fleet(budget_of_one, mgmt, control_plane, workload_clients, namespace)
    for crs in CRSS:
        mgmt.create(fleet.source(crs, "example.invalid/app:1"))
        spec = crs_obj(namespace, crs, [("ConfigMap", crs)], {"budget": namespace[-6:]})
        spec["spec"]["mode"] = "Reconcile"
        spec["spec"]["resources"][0]["substitute"] = True
        spec["spec"]["healthCheck"] = {"wait": True, "timeout": "5m"}
        mgmt.create(spec)
    for index, cluster in enumerate(CLUSTERS):
        fleet.add(cluster, index)
    # First installs go everywhere at once.
    for cluster in CLUSTERS:
        fleet.make_ready(cluster)
    for crs in CRSS:
        wait_condition(mgmt, namespace, crs, "Ready", "True", "Applied")
    for cluster in CLUSTERS:
        for crs in CRSS:
            before = fleet.hash(cluster, crs)
            assert before is not None
            fleet.before[cluster, crs] = before
    assert fleet.gauge() == 0

    for crs in CRSS:
        fleet.edit(crs, "example.invalid/app:2")
    first = wait_for(lambda: fleet.next_updating(0), TIMEOUT, message="one cluster updating")
    assert fleet.admitted == [first]
    wait_for(lambda: fleet.gauge() == 1, TIMEOUT, message="crs_updating_clusters 1")

    # A first install under a full budget: both CRSs at once, and no place taken.
    fleet.add(LATE, len(CLUSTERS))
    installing = {crs: "installing" for crs in CRSS}
    wait_for(lambda: fleet.look()[LATE] == installing, TIMEOUT, message=f"{LATE} installing")
    assert fleet.gauge() == 1
    fleet.make_ready(LATE)
    wait_for(lambda: set(fleet.look()[LATE].values()) == {"done"}, TIMEOUT)
    assert fleet.admitted == [first]

    # Each Ready cluster gives its place to the next one in line.
    for count in range(1, len(CLUSTERS)):
        fleet.make_ready(fleet.admitted[-1])
        wait_for(lambda c=count: fleet.next_updating(c), TIMEOUT, message="the next one updating")
        assert len(fleet.admitted) == count + 1, fleet.admitted
        wait_for(lambda: fleet.gauge() == 1, TIMEOUT, message="crs_updating_clusters 1")
    fleet.make_ready(fleet.admitted[-1])
    wait_for(
        lambda: all(set(s.values()) == {"done"} for s in fleet.look().values()),
        TIMEOUT,
        message="every cluster Ready on the new revision",
    )
    assert sorted(fleet.admitted) == sorted(CLUSTERS), fleet.admitted
    wait_for(lambda: fleet.gauge() == 0, TIMEOUT, message="crs_updating_clusters 0")
    for crs in CRSS:
        wait_condition(mgmt, namespace, crs, "Ready", "True", "Applied")
