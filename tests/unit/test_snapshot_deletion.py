"""Deleting a deleted CRS's snapshots (``engine.io.snapshots.Snapshots.delete_all``):
every ConfigMap and Secret labelled as its snapshot goes, no other; they are read page
by page, so snapshots carrying large annotations (a last-applied annotation of many
commas) do not add up to a refused LIST that would keep them."""

from __future__ import annotations

from typing import Any

from crs_controller.core.rollout.snapshots import SNAPSHOT_LABEL
from crs_controller.core.spec.objects import parse_crs
from crs_controller.engine.io.snapshots import Snapshots

from .memory_kube import MemoryKube

NS = "fleet"
UID = "0b6a4f3e-5c1d-4c53-9e2a-7c1f0d2b9a11"


def labelled(kind: str, name: str, of: str, commas: int) -> dict[str, Any]:
    meta = {
        "name": name,
        "namespace": NS,
        "labels": {SNAPSHOT_LABEL: of},
        "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "," * commas},
    }
    return {"apiVersion": "v1", "kind": kind, "metadata": meta}


async def test_every_snapshot_of_a_deleted_crs_goes_however_large_together() -> None:
    kube = MemoryKube("management")
    ours = [
        labelled(kind, f"cni-{n}", UID, 600) for kind in ("ConfigMap", "Secret") for n in (1, 2)
    ]
    for obj in [*ours, labelled("ConfigMap", "other-1", "another-uid", 600)]:
        await kube.create(obj)
    kube.values = 1_000  # each snapshot is under it, two together are over it
    crs = parse_crs(
        {"kind": "ClusterResourceSet", "metadata": {"name": "cni", "namespace": NS, "uid": UID}}
    )
    snapshots = Snapshots(kube, None, None, None)  # type: ignore[arg-type]
    await snapshots.delete_all(crs)
    assert sorted((k, n) for (_, k, _, n) in kube.objects) == [("ConfigMap", "other-1")]
