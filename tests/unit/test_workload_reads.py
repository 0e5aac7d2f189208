"""What the controller reads back from a workload cluster. The health wait GETs the
objects the CRS applied, one each, through the real client (``KubeClient`` over an
in-memory transport): a namespace full of other big objects, or objects spread over
namespaces, costs it nothing, and no LIST of a namespace or of the cluster goes out."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import urlsplit

import httpcore
import pytest

from crs_controller.clients.kube import KubeClient, Transport
from crs_controller.clients.kubeconfig import Endpoint
from crs_controller.core.api.models import HealthCheck, ObjectRef, ResourceBinding
from crs_controller.core.errors import AnswerTooLarge
from crs_controller.core.state.status import Outcome
from crs_controller.engine.reconcile.workload.observing import Checked, Observer, check_health

MANAGER = "crs-controller"
APPLIED_AT = datetime(2026, 11, 22, 10, 0, 0, tzinfo=UTC)
APPLIED = Outcome("Applied", "Applied", "all resources applied", 1, revision="xxh3:1")
DISCOVERY = {
    "kind": "APIResourceList",
    "resources": [{"name": "configmaps", "kind": "ConfigMap", "namespaced": True}],
}
SECRET_TEXT = "token=s3cr3t"


class Namespaces:
    """A transport serving ConfigMaps: ``mine`` in two namespaces, and 40 dashboards
    of 60 KB each in ``monitoring``, too many JSON values for one workload LIST."""

    def __init__(self) -> None:
        panels = json.dumps({"panels": [{"id": i, "x": 1, "t": "a,b"} for i in range(1500)]})
        self.objects = {
            (space, name): {"metadata": {"name": name, "namespace": space}, "data": data}
            for space, name, data in [
                *[("monitoring", f"dash-{n}", {"d.json": panels}) for n in range(40)],
                ("monitoring", "mine", {"k": "v"}),
                ("apps", "mine", {"k": "v"}),
            ]
        }
        self.requests: list[tuple[str, str]] = []

    async def handle_async_request(self, request: httpcore.Request) -> httpcore.Response:
        path = urlsplit(request.url.target.decode()).path
        self.requests.append((request.method.decode(), path))
        code, body = self._answer(path)
        headers = [(b"Content-Type", b"application/json")]
        return httpcore.Response(code, headers=headers, content=json.dumps(body).encode())

    def _answer(self, path: str) -> tuple[int, Any]:
        if path == "/api/v1":
            return 200, DISCOVERY
        parts = path.split("/")  # /api/v1/namespaces/NS/configmaps[/NAME]
        if len(parts) == 7 and (parts[4], parts[6]) in self.objects:
            return 200, {"kind": "ConfigMap", **self.objects[(parts[4], parts[6])]}
        if len(parts) == 7:
            return 404, {"kind": "Status", "reason": "NotFound", "code": 404}
        space = parts[4] if len(parts) == 6 else None  # else all namespaces
        items = [o for (where, _), o in self.objects.items() if space in (None, where)]
        return 200, {"kind": "ConfigMapList", "metadata": {"resourceVersion": "1"}, "items": items}

    async def aclose(self) -> None:
        pass


def _client(server: Namespaces) -> KubeClient:
    def connect(endpoint: Endpoint, context: Any) -> Transport:
        return server

    return KubeClient(Endpoint(server="https://w1.example"), name="cluster w1", transport=connect)


async def _look(client: KubeClient, *objects: ObjectRef) -> Checked:
    resource = ResourceBinding(
        kind="ConfigMap",
        name="src",
        hash="xxh3:a",
        applied=True,
        last_applied_time=APPLIED_AT,
        objects=list(objects),
    )
    return await check_health(
        Observer(client, MANAGER),
        HealthCheck(wait=True, timeout="5m"),
        [resource],
        applied=APPLIED,
        limit=300.0,
        previous=None,
        sent_now=True,
        now=APPLIED_AT + timedelta(seconds=5),
    )


def _mine(namespace: str) -> ObjectRef:
    return ObjectRef(api_version="v1", kind="ConfigMap", namespace=namespace, name="mine")


async def test_the_health_wait_reads_one_object_beside_many_big_ones() -> None:
    server = Namespaces()
    client = _client(server)
    # What it used to do: one LIST of the namespace, beyond what the client reads.
    with pytest.raises(AnswerTooLarge):
        await client.list("v1", "ConfigMap", "monitoring")
    server.requests.clear()

    assert await _look(client, _mine("monitoring")) == Checked(APPLIED)
    assert server.requests == [("GET", "/api/v1/namespaces/monitoring/configmaps/mine")]


async def test_objects_in_two_namespaces_are_read_one_by_one_never_cluster_wide() -> None:
    server = Namespaces()
    gone = ObjectRef(api_version="v1", kind="ConfigMap", namespace="apps", name="gone")
    checked = await _look(_client(server), _mine("monitoring"), _mine("apps"), gone)
    assert checked.outcome.message == "waiting for ConfigMap apps/gone: not found"
    assert [method for method, _ in server.requests] == ["GET"] * 4  # discovery, 3 objects
    assert "/api/v1/configmaps" not in [path for _, path in server.requests]
