"""The beforeDelete hook of a cleanup before a Cluster's deletion, against in-memory
clients: a hook object the server refuses holds the cleanup, and when it came from a
Secret the server's text (which may quote the refused value) reaches neither the
Event nor the log."""

from __future__ import annotations

import base64
import json

import yaml
from structlog.testing import capture_logs

from crs_controller.core.errors import APIError
from crs_controller.core.state.bindings import entries_by_crs
from crs_controller.engine.reconcile.workload.uninstall import uninstall

from .builders import NS, crs, reconcile, world_with

VALUE = "hunter2-do-not-show"


def hook_secret() -> dict[str, object]:
    hook = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "wipe", "namespace": "default"},
        "data": {"token": VALUE},
    }
    text = base64.b64encode(yaml.safe_dump(hook).encode()).decode()
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "addons.cluster.x-k8s.io/resource-set",
        "metadata": {"name": "hook", "namespace": NS},
        "data": {"hook.yaml": text},
    }


async def test_a_refused_hook_object_from_a_secret_is_not_quoted() -> None:
    cleanup = {"ensure": True, "beforeDelete": [{"kind": "Secret", "name": "hook"}]}
    world = await world_with(crs("apps", "src", deletionPolicy="Delete", uninstall=cleanup))
    await world.add(hook_secret())
    await reconcile(world)
    client = world.ctx.workloads.clients["c1"]  # type: ignore[attr-defined]
    client.fail_with = APIError(
        "apply ConfigMap default/wipe: 422 Unprocessable Entity",
        status=422,
        body=f'ConfigMap "wipe" is invalid: data.token: Invalid value: "{VALUE}"',
        causes=(("data.token", "FieldValueInvalid"),),
    )
    binding = world.bindings.get(NS, "c1")
    cluster, target = world.clusters.get(NS, "c1"), world.crss.get(NS, "apps")
    assert binding is not None and binding.model is not None
    assert cluster is not None and target is not None
    with capture_logs() as logs:
        done = await uninstall(world.ctx, client, cluster, entries_by_crs(binding.model), [target])
    assert "apps" in done.remaining  # held: nothing deleted
    events = [o for (_, kind, _, _), o in world.mgmt.objects.items() if kind == "Event"]
    told = [e["message"] for e in events if e.get("reason") == "UninstallFailed"]
    assert told and "data.token: FieldValueInvalid" in told[0]
    assert VALUE not in json.dumps(events) and VALUE not in json.dumps(logs, default=str)
