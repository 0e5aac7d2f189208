"""The hooks of a controller run with ``--namespace`` (``app.runner``'s answers,
``engine.reconcile.hook``): Cluster API calls them for Clusters of every namespace, and
such a controller's RBAC refuses every read outside its own. A Cluster of another
namespace is answered "nothing to do" (0) at once, with no request: a refused read
would be answered "retry" for ever and hold that Cluster's deletion or upgrade. A
Cluster of the watched namespace is still read and held."""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import pytest

from crs_controller.app import runner
from crs_controller.app.extension import (
    AFTER_CONTROL_PLANE_UPGRADE,
    BEFORE_CLUSTER_DELETE,
    BEFORE_CLUSTER_UPGRADE,
    BEFORE_WORKERS_UPGRADE,
    HOOKS_API,
    RETRY_ON_ERROR_SECONDS,
    Hook,
    answer,
    asks,
)
from crs_controller.core.errors import APIError
from crs_controller.engine.io.parsed_crss import ParsedCRSs
from crs_controller.engine.reconcile.context import Settings

from .memory_kube import CLUSTER_API

NOW = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)


@dataclass
class Refusing:
    """A management client whose RBAC refuses everything: every request is recorded,
    then refused with 403."""

    requests: list[tuple[str, str, str | None]] = field(default_factory=list)

    async def get(
        self, api_version: str, kind: str, name: str, namespace: str | None = None
    ) -> Any:
        self.requests.append(("get", kind, namespace))
        raise APIError(f"get {kind}: 403 forbidden", status=403)

    def pages(self, api_version: str, kind: str, namespace: str | None = None, **_: Any) -> Any:
        self.requests.append(("list", kind, namespace))
        raise APIError(f"list {kind}: 403 forbidden", status=403)


@dataclass
class Clock:
    def wall(self) -> datetime:
        return NOW


@dataclass
class FakeController:
    """What the hook answers use of a ``Controller``."""

    mgmt: Refusing
    settings: Settings
    cluster_api_version: str = CLUSTER_API
    clock: Clock = field(default_factory=Clock)
    nudged: list[Any] = field(default_factory=list)

    def nudge(self, cluster: Any) -> None:
        self.nudged.append(cluster)


def served(controller: FakeController) -> dict[Hook, Any]:
    """The hooks as ``run`` serves them for ``controller``."""
    parsed = ParsedCRSs()
    status: Any = functools.partial(runner._hook_answer, controller, parsed)
    gate: Any = functools.partial(runner._gate_answer, controller, parsed)
    return asks(status, gate)


def request(hook: Hook, namespace: str) -> dict[str, Any]:
    meta = {"name": "work-1", "namespace": namespace}
    cluster = {"apiVersion": CLUSTER_API, "kind": "Cluster", "metadata": meta}
    return {
        "apiVersion": HOOKS_API,
        "kind": f"{hook.name}Request",
        "cluster": cluster,
        "kubernetesVersion": "v1.34.0",
        "toKubernetesVersion": "v1.34.0",
    }


HOOKS = [BEFORE_CLUSTER_DELETE, BEFORE_CLUSTER_UPGRADE, AFTER_CONTROL_PLANE_UPGRADE]
HOOKS += [BEFORE_WORKERS_UPGRADE]


@pytest.mark.parametrize("hook", HOOKS, ids=lambda hook: hook.name)
async def test_a_cluster_of_another_namespace_is_answered_nothing_to_do_unread(
    hook: Hook,
) -> None:
    controller = FakeController(Refusing(), Settings(namespace="team-a"))
    response = await answer(request(hook, "team-b"), hook, served(controller)[hook])
    assert response["status"] == "Success"
    assert response["retryAfterSeconds"] == 0
    assert "does not watch" in response["message"]
    assert controller.mgmt.requests == []
    assert controller.nudged == []


@pytest.mark.parametrize("hook", HOOKS, ids=lambda hook: hook.name)
async def test_a_cluster_of_the_watched_namespace_is_still_read(hook: Hook) -> None:
    """The positive sign for the test above: in its own namespace the same controller
    reads the API (refused here, so the answer is "retry", never 0)."""
    controller = FakeController(Refusing(), Settings(namespace="team-a"))
    response = await answer(request(hook, "team-a"), hook, served(controller)[hook])
    assert response["retryAfterSeconds"] == RETRY_ON_ERROR_SECONDS > 0
    assert controller.mgmt.requests[0][2] == "team-a"


async def test_a_controller_of_every_namespace_reads_any_cluster() -> None:
    controller = FakeController(Refusing(), Settings(namespace=None))
    hook = BEFORE_CLUSTER_DELETE
    response = await answer(request(hook, "team-b"), hook, served(controller)[hook])
    assert response["retryAfterSeconds"] == RETRY_ON_ERROR_SECONDS
    assert controller.mgmt.requests == [("get", "Cluster", "team-b")]
