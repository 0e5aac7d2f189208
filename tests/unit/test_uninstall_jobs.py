"""The beforeDelete Jobs of a cleanup before a Cluster's deletion, against in-memory
clients: a paused CRS runs no hook, deletes nothing and does not hold the deletion; a
Job that sets ttlSecondsAfterFinished is refused, naming the field, never created; a
failed Job is deleted so that the retry runs it again; and a Job of the same name
created for another CRS's hook is neither run nor read as this CRS's result, the
collision named. Nothing of a CRS is cleaned up while a CRS that depends on it still
is."""

from __future__ import annotations

from typing import Any

from crs_controller.core.api.models import API_VERSION
from crs_controller.core.state.bindings import entries_by_crs
from crs_controller.engine.io.parsed_crss import ParsedCRSs
from crs_controller.engine.reconcile.hook import hook_status
from crs_controller.engine.reconcile.workload.uninstall import Cleanup, uninstall

from .builders import NS, configmap_source, crs, payload, reconcile, world_with
from .memory_kube import CLUSTER_API, MemoryKube, World

Obj = dict[str, Any]
CLEANUP = {"ensure": True, "beforeDelete": [{"kind": "ConfigMap", "name": "pre"}]}


JOB = ("batch/v1", "Job", "default", "pre-delete")


def hook_job(**spec: Any) -> Obj:
    container = {"name": "wipe", "image": "busybox", "command": ["true"]}
    template = {"spec": {"containers": [container], "restartPolicy": "Never"}}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "pre-delete", "namespace": "default"},
        "spec": {"template": template, **spec},
    }


async def applied_then_deleting(*crss: Obj, hook: Obj | None = None) -> World:
    """``crss`` applied to c1, the hook ConfigMap ``pre`` holding ``hook``; then c1 is
    being deleted."""
    world = await world_with(*crss)
    await world.add(configmap_source("pre", hook or hook_job()))
    await reconcile(world)
    await mark(world, CLUSTER_API, "Cluster", "c1", deletionTimestamp="2026-11-22T10:00:00Z")
    return world


async def mark(world: World, api_version: str, kind: str, name: str, **meta: Any) -> None:
    live = await world.mgmt.get(api_version, kind, name, NS)
    assert live is not None
    live["metadata"].update(meta)
    await world.update(live)


async def held(world: World) -> bool:
    live = await world.mgmt.get(CLUSTER_API, "Cluster", "c1", NS)
    assert live is not None
    mgmt: Any = world.mgmt
    now = world.ctx.clock.wall()
    retry_after, _ = await hook_status(mgmt, CLUSTER_API, live, now, parsed=ParsedCRSs())
    return retry_after > 0


async def test_a_paused_crs_runs_no_hook_and_does_not_hold_the_deletion() -> None:
    world = await applied_then_deleting(crs("a", "src", deletionPolicy="Delete", uninstall=CLEANUP))
    assert await held(world)  # the positive sign: unpaused, it would hold
    paused = {"cluster.x-k8s.io/paused": "true"}
    await mark(world, API_VERSION, "ClusterResourceSet", "a", annotations=paused)
    workload = world.ctx.workloads.clients["c1"]
    before = len(workload.writes())
    await reconcile(world)
    assert workload.writes()[before:] == []
    assert not await held(world)
    assert world.index.holders(NS, "a") == ["c1"]  # its entry stays, as anywhere
    # The same pass once unpaused runs the hook: the paused one looked and held back.
    await mark(world, API_VERSION, "ClusterResourceSet", "a", annotations={})
    await reconcile(world)
    assert any("Job" in str(write) for write in workload.writes()[before:]), workload.writes()


async def clean_up(world: World, name: str) -> Cleanup:
    """One cleanup pass of CRS ``name`` on c1."""
    binding, cluster = world.bindings.get(NS, "c1"), world.clusters.get(NS, "c1")
    target = world.crss.get(NS, name)
    assert binding is not None and binding.model is not None
    assert cluster is not None and target is not None
    client = world.ctx.workloads.clients["c1"]  # type: ignore[attr-defined]
    return await uninstall(world.ctx, client, cluster, entries_by_crs(binding.model), [target])


def told(world: World) -> list[str]:
    events = [o for (_, kind, _, _), o in world.mgmt.objects.items() if kind == "Event"]
    return [e["message"] for e in events if e.get("reason") == "UninstallFailed"]


def finish(workload: MemoryKube, condition: str) -> str:
    """Give the hook Job a finishing condition; its uid."""
    job = workload.objects[JOB]
    job["status"] = {"conditions": [{"type": condition, "status": "True"}]}
    return str(job["metadata"]["uid"])


async def test_a_hook_job_with_a_ttl_is_refused_naming_the_field() -> None:
    spec = crs("a", "src", deletionPolicy="Delete", uninstall=CLEANUP)
    world = await applied_then_deleting(spec, hook=hook_job(ttlSecondsAfterFinished=0))
    workload = world.ctx.workloads.clients["c1"]
    done = await clean_up(world, "a")
    assert "a" in done.remaining  # held: nothing deleted
    assert JOB not in workload.objects
    assert any("spec.ttlSecondsAfterFinished" in m for m in told(world))


async def test_a_failed_hook_job_runs_again_at_the_retry() -> None:
    world = await applied_then_deleting(crs("a", "src", deletionPolicy="Delete", uninstall=CLEANUP))
    workload = world.ctx.workloads.clients["c1"]
    workload.keeps_status = True
    assert "a" in (await clean_up(world, "a")).remaining  # the Job runs
    first = finish(workload, "Failed")
    assert "a" in (await clean_up(world, "a")).remaining  # failed: held
    assert any("pre-delete failed" in m for m in told(world))
    assert "a" in (await clean_up(world, "a")).remaining  # the retry
    again = workload.objects[JOB]
    assert again["metadata"]["uid"] != first and "status" not in again  # a new run
    finish(workload, "Complete")
    assert "a" not in (await clean_up(world, "a")).remaining
    assert ("delete", "ConfigMap/addon") in workload.writes()


async def test_another_crss_hook_job_of_the_same_name_is_not_this_crss_result() -> None:
    spec = {"deletionPolicy": "Delete", "uninstall": CLEANUP}
    world = await applied_then_deleting(crs("a", "src", **spec), crs("b", "src", **spec))
    workload = world.ctx.workloads.clients["c1"]
    await clean_up(world, "a")
    finish(workload, "Complete")
    before = len(workload.writes())
    assert "b" in (await clean_up(world, "b")).remaining  # held: not b's Job
    assert workload.writes()[before:] == []  # neither applied over a's nor deleted
    assert any("default/pre-delete" in m and "default/a" in m for m in told(world))


async def test_a_dependency_is_cleaned_up_only_once_its_dependent_is() -> None:
    """Removal runs the other way: while the hook Job of ``csi`` runs, nothing of
    ``cni``, which it depends on, is deleted; once the Job completes, both go,
    ``csi``'s objects first."""
    world = await world_with(
        crs("cni", "src", deletionPolicy="Delete", uninstall={"ensure": True}),
        crs(
            "csi",
            "csi-src",
            deletionPolicy="Delete",
            uninstall=CLEANUP,
            dependsOn=[{"name": "cni"}],
        ),
    )
    await world.add(configmap_source("csi-src", payload("csi-addon")))
    await world.add(configmap_source("pre", hook_job()))
    await reconcile(world)
    await mark(world, CLUSTER_API, "Cluster", "c1", deletionTimestamp="2026-11-22T10:00:00Z")
    workload = world.ctx.workloads.clients["c1"]
    workload.keeps_status = True
    await reconcile(world)
    assert JOB in workload.objects  # the positive sign: csi's cleanup began
    assert ("delete", "ConfigMap/addon") not in workload.writes()
    finish(workload, "Complete")
    await reconcile(world)
    deleted = [w for w in workload.writes() if w[0] == "delete" and "addon" in w[1]]
    assert deleted == [("delete", "ConfigMap/csi-addon"), ("delete", "ConfigMap/addon")]
