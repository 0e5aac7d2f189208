"""One tenant's flood of notices cannot silence another's: a receiver's line
(``core.notifications.line``) merges a CRS's repeated notices and, full, drops from
the tenant holding the most; the sender logs its drops in one line per interval with
counts (``engine.runtime.notifying``); a deletion refused on many clusters is one
``DeletionRefused`` Event and notification for the CRS, not one per cluster
(``engine.reconcile.scope`` through ``memory.notes``).

Time is a ``FakeClock``: nothing waits on real time."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

import structlog

from crs_controller.core.notifications.delivery import DEADLINE, DROPS_LOGGED_EVERY, backoff
from crs_controller.core.notifications.line import Line
from crs_controller.core.notifications.payloads import CLUSTERS_SHOWN, Notice, notice
from crs_controller.core.state.prune_decisions import DELETION_REFUSED
from crs_controller.engine.io import metrics
from crs_controller.engine.memory.notes import Note, gather
from tests.unit.builders import NS as HERE
from tests.unit.builders import configmap_source, crs, payload, reconcile, world_with
from tests.unit.fake_clock import FakeClock
from tests.unit.test_notifier import HANG, FakeReceiver, running, sender, until


def of(
    namespace: str,
    crs_name: str,
    reason: str = "RolloutHalted",
    cluster: str = "c1",
    revision: str = "r1",
) -> Notice:
    made = notice(
        reason,
        namespace,
        crs_name,
        f"{reason} on {cluster}",
        revision=revision,
        clusters=[cluster],
        id=f"{namespace}/{crs_name}/{reason}/{cluster}",
        time=datetime.now(UTC),
    )
    assert made is not None
    return made


def hanging() -> tuple[FakeClock, FakeReceiver]:
    """A clock, and a receiver whose first POST hangs (then answers 200)."""
    clock = FakeClock()
    return clock, FakeReceiver(clock, answers=[HANG])


def subjects(line: Line) -> list[str]:
    taken = []
    while len(line):
        told = line.take()
        taken.append(f"{told.namespace}/{told.crs}")
    return taken


def test_a_full_line_drops_from_the_tenant_holding_the_most() -> None:
    line = Line(4)
    line.add(of("team-b", "web"))
    for n in range(10):
        line.add(of("team-a", f"crs-{n}"))
    assert subjects(line) == ["team-b/web", "team-a/crs-7", "team-a/crs-8", "team-a/crs-9"]


def test_within_a_tenant_the_crs_holding_the_most_loses_its_oldest() -> None:
    line = Line(4)
    line.add(of("team-a", "quiet"))
    for reason in ("RolloutHalted", "ValidationFailed", "RolloutComplete", "RolloutRolledBack"):
        line.add(of("team-a", "loud", reason))
    assert len(line) == 4
    assert subjects(line)[0] == "team-a/quiet"


def test_when_every_tenant_holds_one_the_new_notice_is_the_one_dropped() -> None:
    line = Line(2)
    line.add(of("team-a", "x"))
    line.add(of("team-b", "y"))
    dropped = line.add(of("team-c", "z"))
    assert dropped is not None and dropped.namespace == "team-c"
    assert subjects(line) == ["team-a/x", "team-b/y"]


def test_a_repeated_notice_is_merged_in_its_place_naming_the_clusters_of_both() -> None:
    line = Line(100)
    line.add(of("team-a", "cni", DELETION_REFUSED, "c0"))
    line.add(of("team-b", "web"))
    for n in range(1, 10_000):
        assert line.add(of("team-a", "cni", DELETION_REFUSED, f"c{n}")) is None
    assert len(line) == 2
    merged = line.take()
    assert (merged.crs, merged.reason, merged.message) == (
        "cni",
        DELETION_REFUSED,
        f"{DELETION_REFUSED} on c9999",
    )
    assert len(merged.clusters) == CLUSTERS_SHOWN
    assert len(merged.clusters) + merged.clusters_omitted == 10_000
    assert line.take().namespace == "team-b"


async def test_a_flood_of_another_tenant_never_pushes_out_a_waiting_notice() -> None:
    """The receiver is busy with one slow POST; team-b's RolloutHalted waits; then 150
    DeletionRefused notices of team-a's CRSs come. team-b's is still sent."""
    clock, receiver = hanging()
    dropped = metrics.NOTIFICATIONS_DROPPED._value.get()
    notifier = sender(clock, receiver)
    with structlog.testing.capture_logs() as logs:
        async for _ in running(notifier):
            notifier.tell(of("team-a", "first", "RolloutComplete"))
            await until(lambda: len(receiver.got) == 1)  # being posted: it hangs
            notifier.tell(of("team-b", "web"))
            for n in range(150):
                notifier.tell(of("team-a", f"crs-{n}", DELETION_REFUSED, f"c{n}"))
            clock.advance(DEADLINE)
            await until(lambda: receiver.cancelled == 1 and len(clock.deadlines()) == 1)
            clock.advance(backoff(1))
            await until(lambda: len(receiver.got) == 102)  # the first twice, and the line
    assert "team-b/web" in receiver.subjects()
    assert metrics.NOTIFICATIONS_DROPPED._value.get() == dropped + 51
    lines = [e for e in logs if "dropped" in e["event"]]
    assert [(e["dropped"], e["namespaces"]) for e in lines] == [(1, {"team-a": 1})]


async def test_one_crs_refused_on_every_cluster_is_one_notice() -> None:
    clock, receiver = hanging()
    notifier = sender(clock, receiver)
    async for _ in running(notifier):
        notifier.tell(of("team-b", "web"))
        await until(lambda: len(receiver.got) == 1)
        for n in range(10_000):
            notifier.tell(of("team-a", "cni", DELETION_REFUSED, f"c{n}"))
        clock.advance(DEADLINE)
        await until(lambda: receiver.cancelled == 1 and len(clock.deadlines()) == 1)
        clock.advance(backoff(1))
        await until(lambda: len(receiver.got) == 3)
        for _ in range(100):  # turns of the loop, no time: any further POST would go
            await asyncio.sleep(0)
    assert receiver.subjects() == ["team-b/web", "team-b/web", "team-a/cni"]
    data = receiver.got[-1][2]["data"]
    assert data["clustersOmitted"] + len(data["clusters"]) == 10_000


async def test_drops_are_logged_once_per_interval_with_their_counts() -> None:
    clock, receiver = hanging()
    notifier = sender(clock, receiver, limit=2)
    with structlog.testing.capture_logs() as logs:

        def logged() -> list[tuple[int, dict[str, int]]]:
            return [(e["dropped"], e["namespaces"]) for e in logs if "dropped" in e["event"]]

        start = clock.now()
        async for _ in running(notifier):
            notifier.tell(of("team-a", "first"))
            await until(lambda: len(receiver.got) == 1)  # being posted: it hangs
            for n in range(500):
                notifier.tell(of("team-a" if n % 5 else "team-c", f"crs-{n}"))
            assert logged() == [(1, {"team-a": 1})]  # the first at once, the rest counted
            clock.advance(DEADLINE)
            await until(lambda: receiver.cancelled == 1 and len(clock.deadlines()) == 1)
            clock.advance(backoff(1))
            await until(lambda: len(receiver.got) == 4)  # the first twice, and the line
            # The positive sign: the sender waits for the interval to log the rest.
            await until(lambda at=start + DROPS_LOGGED_EVERY: clock.deadlines() == [at])
            assert len(logged()) == 1
            clock.advance(DROPS_LOGGED_EVERY - DEADLINE - backoff(1))
            await until(lambda: len(logged()) == 2)
    dropped, namespaces = logged()[1]
    assert dropped == sum(namespaces.values()) == 500 - 2 - 1
    assert set(namespaces) == {"team-a", "team-c"}


def test_refusals_on_many_clusters_are_one_warning_and_no_failure() -> None:
    notes = [
        Note("Warning", DELETION_REFUSED, f"c{n:05}", message="refused to delete what it ...")
        for n in range(10_000)
    ]
    deleted = Note("Normal", "Deleted", "c00000", resources=("v1 ConfigMap default/cm",))
    done, told = gather([deleted, *notes])
    assert done.message == "deleted v1 ConfigMap default/cm from cluster c00000"  # no failure
    assert (told.type, told.reason, len(told.clusters)) == ("Warning", DELETION_REFUSED, 10_000)
    assert told.message.startswith("DeletionRefused on 10000 clusters: c00000: refused")
    assert told.message.endswith("; and 9997 more")


async def test_a_pass_refusing_a_deletion_notes_it_for_the_crs_and_emits_nothing_itself() -> None:
    """Another tool took the object over: pruning refuses to delete it. The cluster's
    pass tells nothing at once; the CRS's notes hold one DeletionRefused."""
    world = await world_with(
        crs("a", "src", deletionPolicy="Delete"),
        mode_source=configmap_source("src", payload("keep"), payload("gone")),
    )
    workload = world.ctx.workloads.clients["c1"]  # type: ignore[attr-defined]
    await reconcile(world)
    [gone] = [o for o in workload.objects.values() if o["metadata"]["name"] == "gone"]
    gone["metadata"]["managedFields"] = [{"manager": "other-tool", "operation": "Apply"}]
    source = await world.mgmt.get("v1", "ConfigMap", "src", HERE)
    assert source is not None
    source["data"] = configmap_source("src", payload("keep"))["data"]
    await world.update(source)
    world.ctx.announcements.take(HERE, "a")  # what the first pass told
    world.mgmt.requests.clear()

    await reconcile(world)
    assert not [w for w in world.mgmt.writes() if w[1].startswith("Event/")]
    [told] = [t for t in world.ctx.announcements.take(HERE, "a") if t.reason == DELETION_REFUSED]
    assert (told.type, told.clusters) == ("Warning", ("c1",))
    assert "gone" in told.message and "other-tool" not in told.message
