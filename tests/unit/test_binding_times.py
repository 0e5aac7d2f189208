"""A binding is tenant-writable, times included: a CRS with a rollout whose cluster's
binding records its outcome at the last second there is (9999-12-31T23:59:59Z) is
still planned and its status written; its rollout is not frozen."""

from __future__ import annotations

import copy

import pytest

from crs_controller.core.api.models import API_VERSION
from crs_controller.engine.reconcile.crs import reconcile_crs

from .builders import NS, crs, reconcile, world_with
from .test_crs_status import restarted
from .test_rollout_failures import status

pytestmark = pytest.mark.asyncio

LAST = "9999-12-31T23:59:59Z"


async def test_an_outcome_at_the_last_second_there_is_is_planned_with() -> None:
    world = await world_with(crs("a", "src", rollout={"maxConcurrent": 1}))
    await reconcile(world)
    key = (API_VERSION, "ClusterResourceSetBinding", NS, "c1")
    binding = copy.deepcopy(world.mgmt.objects[key])
    binding["spec"]["bindings"][0]["outcome"]["time"] = LAST
    await world.mgmt.replace(binding)
    world.sync_bindings()
    entry = world.ctx.caches.entry(NS, "c1", "a")
    assert entry is not None and entry.outcome is not None
    assert entry.outcome.time is not None and entry.outcome.time.year == 9999

    result = await reconcile_crs(restarted(world)[0], NS, "a")
    assert not result.retry
    assert status(world)["rollout"]["phase"] == "Complete"
