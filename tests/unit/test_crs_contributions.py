"""The CRS pass makes its status and rollout plan from the members' contributions,
through the seam on its context (``CRSContext.combining``): each member
contributes for the clusters it owns; while a member's contribution is missing,
nothing is written and the pass looks again shortly; once every member's is in, the
status counts the clusters of them all, and the rollout's maxConcurrent is split
between the members, each admitting its own clusters. Alone (no shard set), a
process contributes for every cluster and its own contribution is the whole."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from structlog.testing import capture_logs

from crs_controller.core.membership.shard import members_stamp
from crs_controller.core.rollout.plan import Plan
from crs_controller.core.spec.objects import CRS
from crs_controller.core.state.contribution import Combined, Contribution, Waiting, combined
from crs_controller.engine.reconcile.context import Alone, ClusterContext, CRSContext
from crs_controller.engine.reconcile.crs import reconcile_crs
from crs_controller.engine.runtime.controller import status_settle

from .builders import (
    NS,
    cluster,
    configmap_source,
    crs,
    kubeconfig_secret,
    payload,
    reconcile,
    world_with,
)
from .memory_kube import MemoryKube, World
from .test_crs_status import restarted, status
from .test_rollout_failures import edit, passes


@dataclass
class Board:
    """The contributions the members of a set have published, by member."""

    members: frozenset[str]
    published: dict[str, Contribution] = field(default_factory=dict)


@dataclass
class Member:
    """One member of ``board``'s set, owning the clusters named ``mine``."""

    me: str
    board: Board
    mine: frozenset[str]

    def members(self) -> frozenset[str]:
        return self.board.members

    def stamp(self) -> str:
        return members_stamp(self.board.members)

    def owns(self, namespace: str, name: str) -> bool:
        return name in self.mine

    async def combined(self, crs: CRS, mine: Contribution) -> Combined | Waiting:
        self.board.published[self.me] = mine
        uid, generation = crs.meta.uid or "", crs.generation
        return combined(self.board.published, self.members(), uid, generation, mine.target)


async def test_the_status_waits_for_every_member_then_counts_the_clusters_of_all() -> None:
    world = await world_with(crs("a", "src"))
    await reconcile(world)  # c1 applied
    await world.add(cluster("c2"))  # matches, never reconciled
    board = Board(frozenset({"m-a", "m-b"}))
    first = replace(world.crs_context(), combining=Member("m-a", board, frozenset({"c1"})))
    second = replace(world.crs_context(), combining=Member("m-b", board, frozenset({"c2"})))
    with capture_logs() as logs:
        result = await reconcile_crs(first, NS, "a")
    assert result.requeue_after == status_settle(0.0)
    assert status(world) == {}  # m-b's contribution is not in yet
    said = [e for e in logs if e["event"] == "status waits"]
    assert said[0]["waiting"] == "waiting for the contributions of m-b (none yet)"
    assert board.published["m-a"].tally.applied == 1
    assert board.published["m-a"].tally.clusters == 1
    await reconcile_crs(second, NS, "a")
    written = status(world)
    assert (written["matchingClusters"], written["appliedClusters"]) == (2, 1)
    assert "observedGeneration" not in written  # c2 has no outcome recorded yet
    applied = next(c for c in written["conditions"] if c["type"] == "ResourcesApplied")
    assert applied["reason"] == "WaitingForClusters"


async def test_alone_a_process_contributes_for_every_cluster() -> None:
    world = await world_with(crs("a", "src"))
    await reconcile(world)
    await world.add(cluster("c2"))
    ctx = world.crs_context()
    assert ctx.combining == Alone()
    assert ctx.combining.owns(NS, "c2")
    await reconcile_crs(ctx, NS, "a")
    written = status(world)
    assert (written["matchingClusters"], written["appliedClusters"]) == (2, 1)


async def four_clusters(max_concurrent: int) -> tuple[World, tuple[CRSContext, ClusterContext]]:
    """c1-c4 on the first revision of CRS a (rolled out under ``max_concurrent``), and
    the contexts of the one process that rolled it out."""
    world = await world_with(crs("a", "src", rollout={"maxConcurrent": max_concurrent}))
    for name in ("c2", "c3", "c4"):
        world.ctx.workloads.clients[name] = MemoryKube(name)  # type: ignore[attr-defined]
        await world.add(cluster(name))
        await world.add(kubeconfig_secret(name))
    alone = restarted(world)
    await passes(world, alone, "c1", "c2", "c3", "c4")
    assert status(world)["rollout"]["phase"] == "Complete"
    return world, alone


async def test_each_member_admits_its_part_of_max_concurrent() -> None:
    """c1-c4 on a revision, then an edit under maxConcurrent 3: m-a holds three of the
    clusters that need it, m-b one; of the three admissions m-a takes two, m-b one."""
    world, _ = await four_clusters(3)
    names = ("c1", "c2", "c3", "c4")
    source = world.mgmt.objects[("v1", "ConfigMap", NS, "src")]
    await world.update({**source, "data": configmap_source("src", payload("addon", "2"))["data"]})
    board = Board(frozenset({"m-a", "m-b"}))
    first = Member("m-a", board, frozenset(names[:3]))
    leader = replace(world.crs_context(), combining=first)
    follower = replace(
        world.crs_context(leading=False), combining=Member("m-b", board, frozenset({"c4"}))
    )
    waited = await reconcile_crs(leader, NS, "a")
    assert waited.requeue_after == status_settle(0.0) and leader.rollouts.plan(NS, "a") is None
    await reconcile_crs(follower, NS, "a")
    await reconcile_crs(leader, NS, "a")
    planned = [ctx.rollouts.plan(NS, "a") for ctx in (leader, follower)]
    assert [p[1].admit for p in planned if p is not None] == [{"c1", "c2"}, {"c4"}]
    assert status(world)["rollout"]["message"] == "step 1/1: 0 of 4 clusters updated"


async def test_every_member_takes_the_halted_revision_one_of_them_remembers() -> None:
    """c1-c4 on revision 1; revision 2 reaches c1 alone (maxConcurrent 1), then the
    sources change again. The leader m-b remembers revision 2 halting (c1 on it, its
    own), m-a (restarted) does not: both plan c1's group first, so of the one
    admission only c1 takes the target, and not also one of m-a's."""
    world, alone = await four_clusters(1)
    await edit(world, "src", payload("addon", "2"))
    await passes(world, alone, "c1")
    second = status(world)["revision"]
    assert status(world)["rollout"]["updatedClusters"] == 1
    await edit(world, "src", payload("addon", "3"))
    board = Board(frozenset({"m-a", "m-b"}))
    leader = replace(restarted(world)[0], combining=Member("m-b", board, frozenset({"c1", "c3"})))
    halted = Plan(frozenset(), "Halted", 1, 0, "halted", None)
    leader.rollouts.set(NS, "a", second, halted)
    follower = replace(
        restarted(world)[0],
        leading=lambda: False,
        combining=Member("m-a", board, frozenset({"c2", "c4"})),
    )
    await reconcile_crs(leader, NS, "a")
    await reconcile_crs(follower, NS, "a")
    await reconcile_crs(leader, NS, "a")
    planned = [ctx.rollouts.plan(NS, "a") for ctx in (leader, follower)]
    admitted = set().union(*(p[1].admit for p in planned if p is not None))
    assert admitted == {"c1"}
