"""The revisions a CRS reconcile keeps on the management cluster (in memory): sources
larger than a snapshot holds get none, a Warning says so once and the revision is
still in the history; the kept snapshots of one CRS stay within their total bytes,
the oldest revisions going first (revisionHistoryLimit aside), each annotated with
the bytes it holds; a rollback by hand is counted once, not on every pass after it
nor by a restarted replica; a rollback in force whose snapshot went stays in force,
holding its clusters; a snapshot's name another object holds is told once,
and the snapshot written whole once the name is free; a snapshot holds the content
its revision was hashed from, or is not written; the snapshots of revisions no
longer kept are deleted on a later pass, but never one of a revision in the history
as the server has it, however late the cache shows it."""

from __future__ import annotations

import base64
import copy
from collections.abc import Callable
from typing import Any

import pytest
import yaml
from structlog.testing import capture_logs

from crs_controller.core.api.models import API_VERSION
from crs_controller.core.errors import APIError
from crs_controller.core.rollout.history import ROLLBACK_ANNOTATION
from crs_controller.core.rollout.snapshots import (
    MAX_SNAPSHOT_BYTES,
    SIZE_ANNOTATION,
    SNAPSHOT_LABEL,
    snapshot_name,
)
from crs_controller.engine.io import metrics
from crs_controller.engine.reconcile import revisions
from crs_controller.engine.reconcile.context import CRSContext
from crs_controller.engine.reconcile.crs import reconcile_crs
from crs_controller.engine.reconcile.rollout import RolledOut, current_sources, rolled_out

from .builders import NS, configmap_source, crs, payload, reconcile, world_with
from .memory_kube import World

Obj = dict[str, Any]


def status(world: World) -> dict[str, Any]:
    stored = world.mgmt.objects[(API_VERSION, "ClusterResourceSet", NS, "a")]
    return dict(stored.get("status") or {})


def snapshots(world: World) -> list[Obj]:
    """The snapshot objects on the management cluster."""
    return [
        obj
        for (_, kind, _, _), obj in world.mgmt.objects.items()
        if kind in ("ConfigMap", "Secret") and SNAPSHOT_LABEL in obj["metadata"].get("labels", {})
    ]


def watch_snapshots(world: World, shown: set[tuple[str, str]]) -> None:
    """Show the snapshots as they are now to the caches (the watch's job); ``shown``:
    those shown before, removed once gone."""
    now = {(o["kind"], o["metadata"]["name"]) for o in snapshots(world)}
    for obj in snapshots(world):
        world.sync(obj)
    for kind, name in shown - now:
        world.forget(kind, NS, name)
    shown.clear()
    shown.update(now)


def warnings(world: World, reason: str) -> list[str]:
    events = [o for k, o in world.mgmt.objects.items() if k[1] == "Event"]
    return [e["message"] for e in events if e["reason"] == reason and e["type"] == "Warning"]


async def edit(world: World, value: str) -> None:
    source = world.mgmt.objects[("v1", "ConfigMap", NS, "src")]
    await world.update({**source, "data": configmap_source("src", payload("addon", value))["data"]})


async def test_sources_larger_than_a_snapshot_holds_get_none_and_a_warning_once() -> None:
    large = configmap_source("src", payload("addon", "x" * MAX_SNAPSHOT_BYTES))
    world = await world_with(crs("a", "src"), mode_source=large)
    ctx = world.crs_context()
    await reconcile_crs(ctx, NS, "a")
    await reconcile_crs(ctx, NS, "a")  # the revision is in the history now: not told again
    assert snapshots(world) == []
    history = status(world)["history"]
    assert len(history) == 1
    rev = history[0]["revision"]
    told = warnings(world, "SnapshotTooLarge")
    assert told == [
        f"revision {rev} cannot be rolled back to: the sources are larger than a snapshot "
        "holds (900 KiB)"
    ]


async def test_the_kept_snapshots_stay_within_their_total_bytes_oldest_first(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Each snapshot holds a little over 100 kB: two fit, a third does not.
    monkeypatch.setattr(revisions, "MAX_HISTORY_BYTES", 250_000)
    world = await world_with(crs("a", "src"))
    ctx, shown = world.crs_context(), set[tuple[str, str]]()
    seen = []
    for value in ("a", "b", "c", "d"):
        await edit(world, value * 100_000)
        watch_snapshots(world, shown)
        await reconcile_crs(ctx, NS, "a")
        seen.append(status(world)["history"][-1]["revision"])
    watch_snapshots(world, shown)
    assert [r["revision"] for r in status(world)["history"]] == seen[2:]
    kept = snapshots(world)
    assert sorted(o["metadata"]["name"] for o in kept) == sorted(
        snapshot_name("a", rev) for rev in seen[2:]
    )
    for obj in kept:
        size = int(obj["metadata"]["annotations"][SIZE_ANNOTATION])
        assert 100_000 < size == len(obj["data"]["sources.json"]) < 125_000
    assert world.configmaps.get(NS, snapshot_name("a", seen[2])) is not None


def manual_rollbacks() -> float:
    return metrics.ROLLBACKS.labels("Manual")._value.get()


async def two_revisions(
    world: World, ctx: CRSContext, shown: set[tuple[str, str]]
) -> tuple[str, str]:
    """Two revisions of the sources, each complete on the cluster, their snapshots
    shown to the caches: returns them, oldest first."""
    for value in ("1", "2"):
        await edit(world, value)
        await reconcile(world)
        watch_snapshots(world, shown)
        await reconcile_crs(ctx, NS, "a")
    first, second = (r["revision"] for r in status(world)["history"])
    return first, second


async def annotate(world: World, annotations: dict[str, str]) -> None:
    stored = world.mgmt.objects[(API_VERSION, "ClusterResourceSet", NS, "a")]
    await world.update({**stored, "metadata": {**stored["metadata"], "annotations": annotations}})


async def test_a_manual_rollback_is_counted_once() -> None:
    world = await world_with(crs("a", "src"))
    ctx, shown = world.crs_context(), set[tuple[str, str]]()
    first, second = await two_revisions(world, ctx, shown)
    assert [r["outcome"] for r in status(world)["history"]] == ["Complete", "Complete"]
    await annotate(world, {ROLLBACK_ANNOTATION: f"{second}/{first}"})
    before = manual_rollbacks()
    await reconcile_crs(ctx, NS, "a")
    assert status(world)["rollout"]["rolledBackFrom"] == second
    assert manual_rollbacks() == before + 1
    await reconcile_crs(ctx, NS, "a")  # the same rollback, on the next pass
    await reconcile_crs(world.crs_context(), NS, "a")  # and by a restarted replica
    assert status(world)["revision"] == first
    assert manual_rollbacks() == before + 1


async def test_a_manual_rollback_after_one_by_itself_is_counted_as_manual() -> None:
    """A rollback by itself ended and spec.rollout went (this process still knew why
    it rolled back): a pass with no rollback in force and no plan forgets why, so a
    later rollback by hand is counted as Manual and names no failure."""
    world = await world_with(crs("a", "src"))
    ctx, shown = world.crs_context(), set[tuple[str, str]]()
    first, second = await two_revisions(world, ctx, shown)
    ctx.rollouts.rolled_back(NS, "a", "halted: 1 cluster failed")
    await reconcile_crs(ctx, NS, "a")  # nothing in force, no rollout planned
    assert ctx.rollouts.because(NS, "a") is None
    await annotate(world, {ROLLBACK_ANNOTATION: f"{second}/{first}"})
    before = manual_rollbacks()
    await reconcile_crs(ctx, NS, "a")
    rollout = status(world)["rollout"]
    assert rollout["rolledBackFrom"] == second and "failed" not in rollout["message"]
    assert manual_rollbacks() == before + 1


def addon_on_c1(world: World) -> str:
    workload = world.ctx.workloads.clients["c1"]  # type: ignore[attr-defined]
    return str(workload.objects[("v1", "ConfigMap", "default", "addon")]["data"]["v"])


async def rolled_back(world: World) -> tuple[CRSContext, set[tuple[str, str]], str, str]:
    """Two revisions, then a rollback by hand to the first, done on the cluster, its
    request gone (a GitOps tool re-applied the CRS): the status keeps it. Returns the
    leader's context, the snapshots shown, and the two revisions, oldest first."""
    ctx, shown = world.crs_context(), set[tuple[str, str]]()
    first, second = await two_revisions(world, ctx, shown)
    await annotate(world, {ROLLBACK_ANNOTATION: f"{second}/{first}"})
    await reconcile_crs(ctx, NS, "a")
    await reconcile(world)
    await annotate(world, {})
    await reconcile_crs(ctx, NS, "a")
    return ctx, shown, first, second


async def passes_held(world: World, ctx: CRSContext, first: str, second: str) -> dict[str, Any]:
    """Two rounds of CRS and cluster passes while the rollback from ``second`` to
    ``first`` cannot read its snapshot: the status keeps it, saying it is refused.
    Returns the status."""
    for _ in range(2):
        await reconcile_crs(ctx, NS, "a")
        await reconcile(world)
    written = status(world)
    assert (written["revision"], written["rollout"]["rolledBackFrom"]) == (first, second)
    assert "rollback refused" in written["rollout"]["message"]
    return written


async def test_a_rollback_whose_snapshot_went_holds_its_clusters_and_stays_in_force() -> None:
    """One process, the leader: a rollback by hand is in force, its request gone (a
    GitOps tool re-applied the CRS), and its snapshot is deleted. The status keeps the
    rollback, never the revision rolled back from rolled out in its place; a Warning
    says why, and the cluster keeps what it has, held."""
    world = await world_with(crs("a", "src"))
    ctx, shown, first, second = await rolled_back(world)
    assert (addon_on_c1(world), status(world)["rollout"]["phase"]) == ("1", "RolledBack")
    await world.mgmt.delete("v1", "ConfigMap", snapshot_name("a", first), NS)
    watch_snapshots(world, shown)
    with capture_logs() as logs:
        await passes_held(world, ctx, first, second)
    assert [m for m in warnings(world, "RollbackRefused") if first in m]
    assert addon_on_c1(world) == "1"
    entry = world.index.entry(NS, "c1", "a")
    assert entry is not None and entry.outcome is not None
    assert entry.outcome.reason == "Progressing" and "held" in entry.outcome.message
    held = [e for e in logs if e["event"] == "rollback held"]
    assert len(held) == 1 and held[0]["log_level"] == "warning"


async def test_a_rollback_to_a_revision_not_in_the_history_is_refused_never_held() -> None:
    """A request naming a revision the history does not hold (a typo, a prefix, a
    stale manifest) is refused as one whose snapshot is gone, pass after pass: the
    status and a Warning say so, the sources stay rolled out and the cluster is not
    held. The history and the snapshots stay as they were, at revisionHistoryLimit
    too: the revision asked for never enters the history."""
    world = await world_with(crs("a", "src", revisionHistoryLimit=2))
    ctx, shown = world.crs_context(), set[tuple[str, str]]()
    first, second = await two_revisions(world, ctx, shown)
    kept = status(world)["history"]
    bogus = "xxh3:0123456789abcdef"
    await annotate(world, {ROLLBACK_ANNOTATION: f"{second}/{bogus}"})
    with capture_logs() as logs:
        for _ in range(2):
            await reconcile_crs(ctx, NS, "a")
            await reconcile(world)
            watch_snapshots(world, shown)
    written = status(world)
    assert written["history"] == kept
    assert (written["revision"], written["rollout"].get("rolledBackFrom")) == (second, None)
    why = f"revision {bogus} has no snapshot"
    assert written["rollout"]["message"].endswith(f"; rollback refused: {why}")
    assert warnings(world, "RollbackRefused") == [why]
    assert snapshot_names(world) == sorted(snapshot_name("a", r) for r in (first, second))
    entry = world.index.entry(NS, "c1", "a")
    assert entry is not None and entry.outcome is not None
    assert entry.outcome.reason == "Applied" and "held" not in entry.outcome.message
    assert addon_on_c1(world) == "2"
    assert not [e for e in logs if e["event"] == "rollback held"]


async def test_a_refused_request_leaves_the_rollback_in_force_as_it_is() -> None:
    """A rollback is in force (in the status, its request gone); a request to a
    revision not in the history is refused and changes nothing: the rollback stays,
    with its history, and the refusal is told."""
    world = await world_with(crs("a", "src"))
    ctx, _, first, second = await rolled_back(world)
    kept = status(world)["history"]
    bogus = "xxh3:0123456789abcdef"
    await annotate(world, {ROLLBACK_ANNOTATION: f"{second}/{bogus}"})
    await reconcile_crs(ctx, NS, "a")
    await reconcile(world)
    written = status(world)
    assert (written["revision"], written["rollout"]["rolledBackFrom"]) == (first, second)
    assert written["rollout"]["phase"] == "RolledBack" and written["history"] == kept
    assert warnings(world, "RollbackRefused") == [f"revision {bogus} has no snapshot"]
    assert addon_on_c1(world) == "1"


async def test_a_held_rollback_keeps_the_history_and_the_snapshots() -> None:
    """A rollback to a revision of the history whose snapshot this process cannot
    read (not in its watch) is held: the status keeps it, but the history is not
    advanced by it and no snapshot is deleted. Once the snapshot is read, the
    history records the rollback."""
    world = await world_with(crs("a", "src", revisionHistoryLimit=2))
    ctx, shown = world.crs_context(), set[tuple[str, str]]()
    first, second = await two_revisions(world, ctx, shown)
    kept = status(world)["history"]
    world.forget("ConfigMap", NS, snapshot_name("a", first))
    await annotate(world, {ROLLBACK_ANNOTATION: f"{second}/{first}"})
    written = await passes_held(world, ctx, first, second)
    assert written["history"] == kept
    assert snapshot_names(world) == sorted(snapshot_name("a", r) for r in (first, second))
    assert addon_on_c1(world) == "2"  # held: what it had
    watch_snapshots(world, set())  # the snapshot comes into the watch
    await reconcile_crs(ctx, NS, "a")
    back = [(r["revision"], r["outcome"]) for r in status(world)["history"]]
    assert back == [(second, "RolledBack"), (first, "Progressing")]


async def test_a_snapshot_name_another_object_holds_is_told_once_not_written() -> None:
    world = await world_with(crs("a", "src"))
    ctx = world.crs_context()
    await reconcile_crs(ctx, NS, "a")
    name = snapshot_name("a", status(world)["history"][-1]["revision"])
    # A tenant's unlabelled ConfigMap holds the name (here: in its place).
    del world.mgmt.objects[("v1", "ConfigMap", NS, name)]
    await world.add(configmap_source(name))
    sent = len(world.mgmt.requests)
    with capture_logs() as logs:
        await reconcile_crs(ctx, NS, "a")
        await reconcile_crs(ctx, NS, "a")
    # The watch shows the name taken: no create is sent for it, pass after pass.
    assert ("create", f"ConfigMap/{name}") not in world.mgmt.requests[sent:]
    told = [r for r in logs if r["event"].startswith("snapshot")]
    assert told == [
        {
            "event": "snapshot name taken",
            "log_level": "warning",
            "crs": f"{NS}/a",
            "revision": status(world)["history"][-1]["revision"],
            "objects": [f"ConfigMap/{name}"],
        }
    ]
    assert SNAPSHOT_LABEL not in world.mgmt.objects[("v1", "ConfigMap", NS, name)]["metadata"].get(
        "labels", {}
    )


async def test_a_snapshot_holds_the_content_its_revision_was_hashed_from() -> None:
    # The source is edited between the pass's hash and its write of the snapshot:
    # written from the edit, the snapshot (immutable, kept) would never hash to its
    # revision and a rollback to it would be refused for good.
    world = await world_with(crs("a", "src"))
    ctx = world.crs_context()
    the_crs = world.index.crs(NS, "a")
    assert the_crs is not None
    rolled = await rolled_out(ctx, the_crs)
    assert rolled is not None
    await edit(world, "2")
    await revisions.snapshot(ctx, the_crs, rolled)
    watch_snapshots(world, set())
    kept = await ctx.snapshots.sources_of(the_crs, rolled.sources)
    assert {key: source.hash for key, source in kept.items()} == dict(rolled.hashes)


async def test_sources_that_hash_to_another_revision_write_no_snapshot_of_it() -> None:
    world = await world_with(crs("a", "src"))
    ctx = world.crs_context()
    the_crs = world.index.crs(NS, "a")
    assert the_crs is not None
    rolled = await rolled_out(ctx, the_crs)
    assert rolled is not None
    await edit(world, "2")
    edited = await current_sources(ctx, the_crs)
    assert edited is not None
    with capture_logs() as logs:
        assert not await ctx.snapshots.write(the_crs, rolled.sources, edited)
    assert snapshots(world) == []
    assert [r["event"] for r in logs] == ["snapshot not written: the sources changed"]


async def test_a_snapshot_secret_whose_name_was_taken_is_written_once_it_is_free() -> None:
    spec = crs("a", "src")
    spec["spec"]["resources"] = [{"kind": "Secret", "name": "sec"}]
    world = await world_with(spec)
    await world.add(secret_source("1"))
    ctx, shown = world.crs_context(), set[tuple[str, str]]()
    await reconcile(world)
    the_crs = world.index.crs(NS, "a")
    assert the_crs is not None
    rolled = await rolled_out(ctx, the_crs)
    assert rolled is not None
    first, name = rolled.sources, snapshot_name("a", rolled.sources)
    # A tenant's unlabelled Secret holds the snapshot Secret's name.
    squatter = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": NS}}
    await world.add(squatter)
    with capture_logs() as logs:
        for _ in range(2):
            await reconcile_crs(ctx, NS, "a")
            watch_snapshots(world, shown)
    told = [r["event"] for r in logs if r["event"].startswith("snapshot")]
    assert told == ["snapshot name taken"]
    assert not ctx.snapshots.kept(the_crs, first)
    del world.mgmt.objects[("v1", "Secret", NS, name)]  # the tenant's Secret goes
    world.forget("Secret", NS, name)
    await reconcile_crs(ctx, NS, "a")
    watch_snapshots(world, shown)
    assert sorted(o["kind"] for o in snapshots(world)) == ["ConfigMap", "Secret"]
    second = await roll_back_by_hand(world, first)
    assert status(world)["rollout"]["rolledBackFrom"] == second
    assert status(world)["revision"] == first


async def roll_back_by_hand(world: World, first: str) -> str:
    """A second revision of the Secret, then a rollback by hand to ``first``: the
    second revision."""
    ctx = world.crs_context()
    stored = world.mgmt.objects[("v1", "Secret", NS, "sec")]
    await world.update({**stored, "data": secret_source("2")["data"]})
    await reconcile(world)
    await reconcile_crs(ctx, NS, "a")
    second: str = status(world)["history"][-1]["revision"]
    assert second != first
    await annotate(world, {ROLLBACK_ANNOTATION: f"{second}/{first}"})
    await reconcile_crs(ctx, NS, "a")
    return second


def secret_source(value: str) -> Obj:
    body = yaml.safe_dump(payload("addon", value)).encode()
    data = {"a": base64.b64encode(body).decode()}
    metadata = {"name": "sec", "namespace": NS}
    kind = {"apiVersion": "v1", "kind": "Secret", "type": "addons.cluster.x-k8s.io/resource-set"}
    return {**kind, "metadata": metadata, "data": data}


def failing_once(world: World, verb: str, what: Callable[..., bool]) -> list[tuple[Any, ...]]:
    """Make the next ``verb`` request (``delete`` or ``replace``) whose arguments
    ``what`` picks fail with a server error; returns the requests that failed."""
    real = getattr(world.mgmt, verb)
    failed: list[tuple[Any, ...]] = []

    async def request(*args: Any, **kwargs: Any) -> Any:
        if not failed and what(*args, **kwargs):
            failed.append(args)
            raise APIError("500 Internal Server Error", status=500)
        return await real(*args, **kwargs)

    setattr(world.mgmt, verb, request)
    return failed


def snapshot_names(world: World) -> list[str]:
    return sorted({o["metadata"]["name"] for o in snapshots(world)})


async def test_a_snapshot_whose_delete_failed_goes_on_a_later_pass() -> None:
    world = await world_with(crs("a", "src", revisionHistoryLimit=1))
    ctx, shown = world.crs_context(), set[tuple[str, str]]()
    await reconcile_crs(ctx, NS, "a")
    first = status(world)["history"][-1]["revision"]
    watch_snapshots(world, shown)
    failed = failing_once(world, "delete", lambda *args, **_: args[1] == "ConfigMap")
    await edit(world, "2")
    with capture_logs() as logs:
        await reconcile_crs(ctx, NS, "a")  # the first revision leaves the history
    second = status(world)["history"][-1]["revision"]
    assert [r["revision"] for r in status(world)["history"]] == [second]
    assert failed == [("v1", "ConfigMap", snapshot_name("a", first), NS)]
    assert [r["event"] for r in logs if r["event"].startswith("snapshot")] == [
        "snapshot written",
        "snapshot deletion failed",
    ]
    watch_snapshots(world, shown)
    assert snapshot_names(world) == sorted(snapshot_name("a", r) for r in (first, second))
    written = world.mgmt.writes()
    await reconcile_crs(ctx, NS, "a")  # nothing else changed: the status stays
    watch_snapshots(world, shown)
    assert snapshot_names(world) == [snapshot_name("a", second)]
    assert world.mgmt.writes()[len(written) :] == [
        ("delete", f"ConfigMap/{snapshot_name('a', first)}")
    ]
    await reconcile_crs(world.crs_context(), NS, "a")  # and another leader after it
    assert snapshot_names(world) == [snapshot_name("a", second)]


async def test_a_snapshot_whose_revision_never_reached_the_history_goes() -> None:
    world = await world_with(crs("a", "src", revisionHistoryLimit=1))
    ctx, shown = world.crs_context(), set[tuple[str, str]]()
    await reconcile_crs(ctx, NS, "a")
    watch_snapshots(world, shown)

    def status_write(obj: Obj, *, subresource: str | None = None) -> bool:
        return subresource == "status"

    failing_once(world, "replace", status_write)
    await edit(world, "2")
    await reconcile_crs(ctx, NS, "a")  # its snapshot is written, the status is not
    watch_snapshots(world, shown)
    lost = snapshot_name("a", (await rolled(world)).sources)
    assert lost in snapshot_names(world)
    assert all(snapshot_name("a", r["revision"]) != lost for r in status(world)["history"])
    await edit(world, "3")  # the sources move on before the status is written again
    await reconcile_crs(ctx, NS, "a")
    watch_snapshots(world, shown)
    await reconcile_crs(world.crs_context(), NS, "a")  # by another leader, once shown
    watch_snapshots(world, shown)
    third = (await rolled(world)).sources
    assert [r["revision"] for r in status(world)["history"]] == [third]
    assert snapshot_names(world) == [snapshot_name("a", third)]


async def rolled(world: World) -> RolledOut:
    """What the CRS "a" rolls out now, as a pass would find it."""
    the_crs = world.index.crs(NS, "a")
    assert the_crs is not None
    found = await rolled_out(world.crs_context(), the_crs)
    assert found is not None
    return found


def is_status_write(obj: Obj, *, subresource: str | None = None) -> bool:
    return subresource == "status"


async def handed_over(world: World, shown: set[tuple[str, str]]) -> tuple[str, str, str]:
    """The leader writes the status of a first revision, the snapshot of a revision
    that never reaches the history, then a history with a second revision; the
    sources move back to the first. The watch shows every snapshot, but the CRS as it
    was after the first status: as another leader's caches may right after a
    handover. Returns the first, the dropped and the second revision."""
    old = world.crs_context()
    await reconcile_crs(old, NS, "a")
    first = status(world)["history"][-1]["revision"]
    stored = copy.deepcopy(world.mgmt.objects[(API_VERSION, "ClusterResourceSet", NS, "a")])
    source = copy.deepcopy(world.mgmt.objects[("v1", "ConfigMap", NS, "src")])
    failing_once(world, "replace", is_status_write)
    await edit(world, "dropped")
    await reconcile_crs(old, NS, "a")  # its snapshot is written, the status is not
    dropped = (await rolled(world)).sources
    await edit(world, "2")
    await reconcile_crs(old, NS, "a")  # the last status this leader writes
    second = status(world)["history"][-1]["revision"]
    assert [r["revision"] for r in status(world)["history"]] == [first, second]
    now = world.mgmt.objects[("v1", "ConfigMap", NS, "src")]
    await world.update({**source, "metadata": now["metadata"]})
    watch_snapshots(world, shown)
    assert snapshot_names(world) == sorted(snapshot_name("a", r) for r in (first, dropped, second))
    old_crs = world.crss.remove(NS, "a")
    world.index.update_crs(old_crs, world.crss.put(stored))
    return first, dropped, second


async def test_a_revision_the_cache_has_yet_to_show_in_the_history_keeps_its_snapshot() -> None:
    world = await world_with(crs("a", "src", revisionHistoryLimit=2))
    shown = set[tuple[str, str]]()
    first, dropped, second = await handed_over(world, shown)
    sent = len(world.mgmt.requests)
    await reconcile_crs(world.crs_context(), NS, "a")  # the status it sees is unchanged
    asked = [r for r in world.mgmt.requests[sent:] if r[0] == "delete" or "ResourceSet/" in r[1]]
    assert asked == [
        ("get", "ClusterResourceSet/a"),
        ("delete", f"ConfigMap/{snapshot_name('a', dropped)}"),
    ]
    assert snapshot_names(world) == sorted(snapshot_name("a", r) for r in (first, second))
    ctx = world.crs_context()
    await reconcile_crs(ctx, NS, "a")  # its own status
    watch_snapshots(world, shown)
    sent = len(world.mgmt.requests)
    await reconcile_crs(ctx, NS, "a")  # unchanged, nothing to delete: nothing read
    assert [r for r in world.mgmt.requests[sent:] if "ResourceSet/" in r[1]] == []
    assert snapshot_names(world) == sorted(snapshot_name("a", r) for r in (first, second))
