"""The shard bucket label on bindings (``addons.crs.dev/shard-bucket``): every binding
written carries its Cluster's bucket; one found without it, or with a value that is
not its bucket (missing, wrong, not a number), gets it with the pass's write, or by
one label-only merge patch when the pass has nothing else to write; a binding already
labelled right is never written for it, and a second pass writes nothing."""

from __future__ import annotations

from typing import Any

import pytest

from crs_controller.core.api.models import (
    API_VERSION,
    CLUSTER_RESOURCE_SET_BINDING_KIND,
    SHARD_BUCKET_LABEL,
    ClusterResourceSetBinding,
    CRSBinding,
    ResourceBinding,
    to_api,
)
from crs_controller.core.membership.shard import bucket_of
from crs_controller.core.state.bindings import desired_binding, mislabelled
from crs_controller.engine.reconcile.recording import write_binding

from .builders import NS
from .memory_kube import World

BUCKET = str(bucket_of(NS, "c1"))
OTHER = str((bucket_of(NS, "c1") + 1) % 1024)
NO_LABEL = object()

LABEL_STATES = [
    pytest.param(NO_LABEL, True, id="missing"),
    pytest.param(OTHER, True, id="another bucket"),
    pytest.param("not-a-number", True, id="not a number"),
    pytest.param("", True, id="empty"),
    pytest.param(f"0{BUCKET}", True, id="the bucket with a leading zero"),
    pytest.param(BUCKET, False, id="its bucket"),
]


def entry(version: int) -> dict[str, CRSBinding]:
    resource = ResourceBinding(kind="ConfigMap", name="a", hash=f"xxh3:{version:016x}")
    return {"a": CRSBinding(cluster_resource_set_name="a", resources=[resource])}


async def stored(world: World, label: object) -> ClusterResourceSetBinding:
    """A binding as a tenant or an older release left it: labelled ``label``."""
    body = to_api(desired_binding(None, namespace=NS, cluster="c1", entries=entry(1), owners=[]))
    labels: dict[str, Any] = {"team": "a"}
    if label is not NO_LABEL:
        labels[SHARD_BUCKET_LABEL] = label
    body["metadata"]["labels"] = labels
    return ClusterResourceSetBinding.model_validate(await world.mgmt.create(body))


async def labels_on_server(world: World) -> dict[str, str]:
    raw = await world.mgmt.get(API_VERSION, CLUSTER_RESOURCE_SET_BINDING_KIND, "c1", NS)
    assert raw is not None
    return dict(raw["metadata"]["labels"])


@pytest.mark.parametrize(("label", "wrong"), LABEL_STATES)
def test_mislabelled(label: object, wrong: bool) -> None:
    binding = desired_binding(None, namespace=NS, cluster="c1", entries=entry(1), owners=[])
    binding.metadata.labels = {} if label is NO_LABEL else {SHARD_BUCKET_LABEL: str(label)}
    assert mislabelled(binding) is wrong


@pytest.mark.parametrize(("label", "wrong"), LABEL_STATES)
async def test_a_pass_with_nothing_else_to_write_patches_the_label_alone_once(
    label: object, wrong: bool
) -> None:
    world = World({})
    read = await stored(world, label)
    before = len(world.mgmt.writes())
    assert await write_binding(world.ctx.bindings, NS, "c1", read, entry(1), []) is True
    patches = [("patch", f"{CLUSTER_RESOURCE_SET_BINDING_KIND}/c1")] if wrong else []
    assert world.mgmt.writes()[before:] == patches
    assert await labels_on_server(world) == {"team": "a", SHARD_BUCKET_LABEL: BUCKET}
    # The next pass (from the binding as written, which the store cached) writes nothing.
    cached = world.bindings.get(NS, "c1")
    again = read if cached is None else cached.valid
    after = len(world.mgmt.writes())
    assert await write_binding(world.ctx.bindings, NS, "c1", again, entry(1), []) is True
    assert world.mgmt.writes()[after:] == []


@pytest.mark.parametrize(("label", "wrong"), LABEL_STATES)
async def test_a_pass_that_writes_the_binding_labels_it_in_the_same_write(
    label: object, wrong: bool
) -> None:
    world = World({})
    read = await stored(world, label)
    before = len(world.mgmt.writes())
    assert await write_binding(world.ctx.bindings, NS, "c1", read, entry(2), []) is True
    assert world.mgmt.writes()[before:] == [("replace", f"{CLUSTER_RESOURCE_SET_BINDING_KIND}/c1")]
    assert await labels_on_server(world) == {"team": "a", SHARD_BUCKET_LABEL: BUCKET}


async def test_a_new_binding_is_created_labelled() -> None:
    world = World({})
    assert await write_binding(world.ctx.bindings, NS, "c1", None, entry(1), []) is True
    assert world.mgmt.writes() == [("create", f"{CLUSTER_RESOURCE_SET_BINDING_KIND}/c1")]
    assert await labels_on_server(world) == {SHARD_BUCKET_LABEL: BUCKET}


async def test_a_label_patch_refused_on_a_race_is_made_again_on_the_binding_read_again() -> None:
    world = World({})
    read = await stored(world, NO_LABEL)
    # Another writer changed the binding since the pass read it (its label still wrong).
    raw = await world.mgmt.get(API_VERSION, CLUSTER_RESOURCE_SET_BINDING_KIND, "c1", NS)
    assert raw is not None
    raw["metadata"]["labels"][SHARD_BUCKET_LABEL] = OTHER
    await world.mgmt.replace(raw)
    assert await write_binding(world.ctx.bindings, NS, "c1", read, entry(1), []) is True
    assert await labels_on_server(world) == {"team": "a", SHARD_BUCKET_LABEL: BUCKET}
