"""What the controller reads back from a workload cluster, and how it takes an answer
it cannot use. The health wait GETs the objects the CRS applied, one each, through
the real client (``KubeClient`` over an in-memory transport): a namespace full of
other big objects, or objects spread over namespaces, costs it nothing, and no LIST
of a namespace or of the cluster goes out. A field of the wrong type in an answer
(a drift LIST, an apply, a CRD being Established) is Unreachable naming the field,
never quoting its value."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import urlsplit

import httpcore
import pytest

from crs_controller.clients.api import Obj
from crs_controller.clients.kube import KubeClient, Transport
from crs_controller.clients.kubeconfig import Endpoint
from crs_controller.core.api.models import HealthCheck, ObjectRef, ResourceBinding
from crs_controller.core.errors import AnswerTooLarge, Unreachable
from crs_controller.core.state.status import Outcome
from crs_controller.engine.reconcile.workload.applying import apply_objects
from crs_controller.engine.reconcile.workload.observing import Checked, Observer, check_health

from .memory_kube import MemoryKube

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


class Listing(MemoryKube):
    """A workload cluster whose LISTs answer ``items`` as they are."""

    def __init__(self, *items: Any) -> None:
        super().__init__("w1")
        self.items = list(items)

    async def list(self, *args: Any, **kwargs: Any) -> tuple[list[Obj], str]:
        return self.items, "1"


ONE = ObjectRef(api_version="v1", kind="ConfigMap", namespace="default", name="one")


@pytest.mark.parametrize(
    ("item", "field"),
    [
        ({"metadata": {"name": "one", "generation": f"{SECRET_TEXT}\nFAKE"}}, "generation"),
        ({"metadata": {"name": "one", "generation": True}}, "generation"),
        ({"metadata": SECRET_TEXT}, "metadata"),
        (SECRET_TEXT, "metadata"),
        ({"metadata": {"name": {"x": SECRET_TEXT}}}, "metadata.name"),
        ({"metadata": {"name": "one", "namespace": 7}}, "metadata.namespace"),
        ({"metadata": {"name": "one", "managedFields": SECRET_TEXT}}, "managedFields"),
        ({"metadata": {"name": "one", "managedFields": [SECRET_TEXT]}}, "managedFields"),
    ],
)
async def test_a_drift_list_of_the_wrong_shape_is_unreachable_naming_the_field(
    item: Any, field: str
) -> None:
    with pytest.raises(Unreachable) as raised:
        await Observer(Listing(item), MANAGER).observe([ONE])
    assert field in str(raised.value) and "w1: LIST ConfigMap" in str(raised.value)
    assert SECRET_TEXT not in str(raised.value)


async def test_a_drift_list_of_the_right_shape_is_read() -> None:
    item = {"metadata": {"name": "one", "namespace": "default", "generation": 3}}
    live = await Observer(Listing(item), MANAGER).observe([ONE])
    assert live[0] is not None and live[0].generation == 3


class Answering(MemoryKube):
    """A workload cluster answering an apply, and a CRD's GET, with ``answer``."""

    def __init__(self, answer: Obj) -> None:
        super().__init__("w1")
        self.answer = answer

    async def apply(self, obj: Any, **kwargs: Any) -> Obj:
        await super().apply(obj, **kwargs)
        return self.answer

    async def get(self, *args: Any, **kwargs: Any) -> Obj | None:
        return self.answer


CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "gizmos.x.io"},
    "spec": {"group": "x.io", "versions": [{"name": "v1"}]},
}
ESTABLISHED = {"conditions": [{"type": "Established", "status": "True"}]}


@pytest.mark.parametrize(
    ("answer", "field"),
    [
        ({"metadata": {"generation": SECRET_TEXT}}, "metadata.generation"),
        ({"status": SECRET_TEXT}, "status is not an object"),
        ({"status": {"conditions": SECRET_TEXT}}, "status.conditions is not a list"),
        ({"status": {"conditions": [SECRET_TEXT]}}, "an item of a list"),
        ({"status": ESTABLISHED, "spec": SECRET_TEXT}, "spec is not an object"),
        ({"status": ESTABLISHED, "spec": {"group": 1}}, "spec.group is not a string"),
        ({"status": ESTABLISHED, "spec": {"group": "x", "versions": [1]}}, "an item of a list"),
        (
            {"status": ESTABLISHED, "spec": {"group": "x", "versions": [{"name": [SECRET_TEXT]}]}},
            "name is not a string",
        ),
    ],
)
async def test_an_apply_or_crd_answer_of_the_wrong_shape_is_unreachable_naming_the_field(
    answer: Obj, field: str
) -> None:
    with pytest.raises(Unreachable) as raised:
        await apply_objects(Answering(answer), [CRD], field_manager=MANAGER, only_missing=False)
    assert field in str(raised.value), str(raised.value)
    assert SECRET_TEXT not in str(raised.value)


async def test_an_established_crd_of_the_right_shape_is_applied() -> None:
    answer = {**CRD, "metadata": {"name": "gizmos.x.io", "generation": 1}, "status": ESTABLISHED}
    applied = await apply_objects(
        Answering(answer), [CRD], field_manager=MANAGER, only_missing=False
    )
    assert applied.ok and len(applied.applied) == 1
