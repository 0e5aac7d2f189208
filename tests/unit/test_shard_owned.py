"""``crs_shard_owned_clusters``: the Clusters a shard member owns, kept as ownership is
decided (the members changing, a Cluster cached or gone), so a scrape of /metrics
hashes no Cluster: exactly the owned count before the share is known, as Clusters
come, change and go, across namespaces, and as members join and leave. Nothing here
runs a server or sleeps."""

from __future__ import annotations

from typing import Any

import pytest
from prometheus_client import generate_latest

from crs_controller.core.membership import shard as rendezvous
from crs_controller.core.membership.lease import LeaseRecord
from crs_controller.core.membership.shard import owner
from crs_controller.core.spec.objects import parse_cluster
from crs_controller.engine.reconcile.context import Settings
from crs_controller.engine.runtime.controller import Controller
from crs_controller.engine.runtime.membership import ShardMembership

from .builders import NS, cluster
from .fake_clock import FakeClock
from .memory_kube import CLUSTER_API, MemoryKube

LEASE = 6.0
ME = "replica-a"
OTHER_NS = "team-b"


def lease(identity: str) -> LeaseRecord:
    return LeaseRecord(f"crs-controller-shard-{identity}", identity, LEASE, "t1", None, 0)


class Fleet:
    """One member's controller and the Clusters its cache holds, as the test knows them."""

    def __init__(self) -> None:
        clock = FakeClock()
        self.controller = Controller(MemoryKube("management"), Settings(), CLUSTER_API, clock=clock)
        self.shard = ShardMembership(
            self.controller.mgmt,
            "crs-system",
            ME,
            lease_seconds=LEASE,
            clock=clock,
            on_change=self.controller.reshard,
        )
        self.controller.join(self.shard)
        self.present: set[tuple[str, str]] = set()
        self.live: set[str] = set()  # the members whose Leases the test renewed

    def join(self, identity: str) -> None:
        if identity == ME:
            self.shard.renewed()
        else:
            self.shard.on_lease(None, lease(identity))
        self.live.add(identity)
        self.shard.refresh()

    def leave(self, identity: str) -> None:
        self.shard.on_lease(lease(identity), None)
        self.live.discard(identity)
        self.shard.refresh()

    def add(self, namespace: str, name: str, version: int = 1) -> None:
        raw: Any = cluster(name)
        raw["metadata"].update(namespace=namespace, resourceVersion=str(version))
        informer = self.controller.informers[1]
        old = informer.get(namespace, name)
        self.controller._on_cluster(old, informer.put(raw))
        self.present.add((namespace, name))

    def delete(self, namespace: str, name: str) -> None:
        self.controller._on_cluster(self.controller.informers[1].remove(namespace, name), None)
        self.present.discard((namespace, name))

    def owned(self) -> int:
        """Brute force: every Cluster present hashed over the members the test made
        live (none while this member's own Lease is not)."""
        members = self.live if ME in self.live else set()
        return sum(owner(members, f"{ns}/{name}") == ME for ns, name in self.present)


def scraped(monkeypatch: pytest.MonkeyPatch) -> float:
    """The gauge as a scrape reads it, asserting the scrape weighed no Cluster."""
    weighed: list[str] = []
    weight = rendezvous.weight

    def counted(member: str, key: str) -> int:
        weighed.append(key)
        return weight(member, key)

    with monkeypatch.context() as patch:
        patch.setattr(rendezvous, "weight", counted)
        text = generate_latest().decode()
    assert weighed == []
    (line,) = (x for x in text.splitlines() if x.startswith("crs_shard_owned_clusters "))
    return float(line.split()[1])


async def test_a_scrape_counts_the_owned_clusters_without_hashing_the_fleet(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fleet = Fleet()
    for n in range(300):
        fleet.add(NS if n % 3 else OTHER_NS, f"c{n:03d}")
    # The share not known yet: nothing owned.
    assert scraped(monkeypatch) == 0
    fleet.join("replica-b")
    assert scraped(monkeypatch) == fleet.owned() == 0  # our own Lease not written yet
    fleet.join(ME)
    assert 100 < scraped(monkeypatch) == fleet.owned() < 200
    # Clusters arrive, are updated (a new version, the same key) and go.
    for n in range(300, 340):
        fleet.add(NS, f"c{n:03d}")
    for n in range(0, 300, 7):
        fleet.add(NS if n % 3 else OTHER_NS, f"c{n:03d}", version=2)
    for n in range(0, 340, 5):
        fleet.delete(NS if n % 3 or n >= 300 else OTHER_NS, f"c{n:03d}")
    # Deleted before it was cached: the watch tells what its last version was.
    fleet.controller._on_cluster(parse_cluster(cluster("never-cached")), None)
    assert scraped(monkeypatch) == fleet.owned()
    # A name in another namespace is another Cluster, with its own owner.
    fleet.add(OTHER_NS, "c301")
    assert scraped(monkeypatch) == fleet.owned()
    # A member joins: it takes some of ours; then leaves again and we take them back.
    before = fleet.owned()
    fleet.join("replica-c")
    assert scraped(monkeypatch) == fleet.owned() < before
    fleet.add(NS, "late")
    fleet.leave("replica-c")
    assert scraped(monkeypatch) == fleet.owned() >= before
    # Our own Lease deleted: we act with nobody and own nothing.
    fleet.leave(ME)
    assert scraped(monkeypatch) == fleet.owned() == 0
    fleet.add(NS, "after")
    assert scraped(monkeypatch) == 0
