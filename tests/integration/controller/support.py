"""Helpers shared by the controller integration tests: objects, waits, counters."""

from __future__ import annotations

import base64
import contextlib
import json
import ssl
import uuid
from collections.abc import Callable, Iterable
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import yaml

from crs_controller.testbed import (
    TEST_NAMESPACE_PREFIX,
    ControlPlane,
    KubeError,
    Server,
    TestbedClient,
    wait_for,
)
from crs_controller.testbed.clusters import register_cluster
from crs_controller.testbed.controller import SYSTEM_NAMESPACE, ControllerProcess

CRS_API = "addons.crs.dev/v1alpha1"
CLUSTER_API = "cluster.x-k8s.io/v1beta1"
RESOURCE_SET_TYPE = "addons.cluster.x-k8s.io/resource-set"
# Workload kubeconfigs authenticate as this user (cluster-admin on the workload
# cluster, as CAPI's kubeconfigs are), so its requests can be told apart in audit logs.
WORKLOAD_USER = "crs-workload-admin"
WRITE_VERBS = {"create", "update", "patch", "delete", "deletecollection"}
TIMEOUT = 45.0

Obj = dict[str, Any]


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


def manifests(*objs: Obj) -> str:
    return yaml.safe_dump_all(objs)


def configmap_obj(name: str, namespace: str = "default", **data: str) -> Obj:
    meta: Obj = {"name": name}
    if namespace:
        meta["namespace"] = namespace
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": data}


def source_configmap(namespace: str, name: str, data: dict[str, str]) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace},
        "data": data,
    }


def source_secret(
    namespace: str, name: str, data: dict[str, str], type_: str = RESOURCE_SET_TYPE
) -> Obj:
    encoded = {k: base64.b64encode(v.encode()).decode() for k, v in data.items()}
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": namespace},
        "type": type_,
        "data": encoded,
    }


def crs_obj(
    namespace: str,
    name: str,
    resources: Iterable[tuple[str, str]],
    selector: dict[str, str],
    mode: str = "ApplyOnce",
    **spec: Any,
) -> Obj:
    return {
        "apiVersion": CRS_API,
        "kind": "ClusterResourceSet",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "clusterSelector": {"matchLabels": selector},
            "resources": [{"kind": k, "name": n} for k, n in resources],
            "mode": mode,
            **spec,
        },
    }


def add_cluster(
    mgmt: TestbedClient,
    workload: Server,
    namespace: str,
    name: str,
    labels: dict[str, str],
    *,
    user: str = WORKLOAD_USER,
    initialized: bool = True,
    version: str | None = None,
) -> Obj:
    """A Cluster on ``workload`` whose kubeconfig is cluster-admin as ``user``: a user
    of its own per Cluster lets the audit log tell which Cluster a request was for.
    With ``version``, its control plane object reports running that version."""
    return register_cluster(
        mgmt,
        workload,
        name=name,
        namespace=namespace,
        labels=labels,
        initialized=initialized,
        kubeconfig_user=user,
        kubeconfig_groups=("system:masters",),
        version=version,
    )


def admin_kubeconfig(control_plane: ControlPlane, tmp_path: Path) -> str:
    """A cluster-admin kubeconfig for the management cluster, as an operator's CLI has."""
    path = control_plane.management.write_kubeconfig(
        tmp_path / "admin.kubeconfig", user="cli-admin", groups=("system:masters",)
    )
    return str(path)


def binding(mgmt: TestbedClient, namespace: str, cluster: str) -> Obj | None:
    return mgmt.get(CRS_API, "ClusterResourceSetBinding", cluster, namespace)


def binding_entry(mgmt: TestbedClient, namespace: str, cluster: str, crs: str) -> Obj | None:
    found = binding(mgmt, namespace, cluster)
    for entry in (found or {}).get("spec", {}).get("bindings", []):
        if entry["clusterResourceSetName"] == crs:
            return dict(entry)
    return None


def condition(obj: Obj | None, kind: str) -> Obj | None:
    for cond in (obj or {}).get("status", {}).get("conditions", []):
        if cond["type"] == kind:
            return dict(cond)
    return None


def wait_condition(
    mgmt: TestbedClient, namespace: str, crs: str, kind: str, status: str, reason: str | None = None
) -> Obj:
    def check() -> Obj | None:
        cond = condition(mgmt.get(CRS_API, "ClusterResourceSet", crs, namespace), kind)
        if cond and cond["status"] == status and (reason is None or cond["reason"] == reason):
            return cond
        return None

    return wait_for(check, TIMEOUT, message=f"{crs} {kind}={status} {reason or ''}")


def crs_status(mgmt: TestbedClient, namespace: str, name: str) -> Obj:
    """The CRS's status as one read gives it ({} before the first write)."""
    crs = mgmt.get(CRS_API, "ClusterResourceSet", name, namespace)
    return dict((crs or {}).get("status") or {})


def wait_rollout(
    mgmt: TestbedClient, namespace: str, name: str, *, after: str | None, **expected: object
) -> Obj:
    """Wait until the CRS's status is about a revision other than ``after`` and its
    ``rollout`` has the ``expected`` fields (``phase="Complete"``, ``waitingFor=...``),
    both from the same read; returns that ``rollout``. The status is folded a moment
    after the bindings change, so right after an outcome it may still be the last
    revision's."""

    def check() -> Obj | None:
        status = crs_status(mgmt, namespace, name)
        rollout = dict(status.get("rollout") or {})
        fresh = status.get("revision") not in (None, after)
        return rollout if fresh and all(rollout.get(k) == v for k, v in expected.items()) else None

    return wait_for(check, TIMEOUT, message=f"{name}: {expected} for a revision other than {after}")


def wait_object(
    client: TestbedClient,
    api_version: str,
    kind: str,
    name: str,
    namespace: str | None = None,
    predicate: Callable[[Obj], bool] = lambda _: True,
    timeout: float = TIMEOUT,
) -> Obj:
    def check() -> Obj | None:
        obj = client.get(api_version, kind, name, namespace)
        return obj if obj is not None and predicate(obj) else None

    return wait_for(check, timeout, message=f"{kind} {namespace}/{name}")


def requests_by(
    servers: Iterable[Server],
    users: set[str],
    since: float,
    verbs: set[str],
    namespace: str | None = None,
) -> list[str]:
    """Requests with one of ``verbs`` made by ``users`` on ``servers`` after ``since``
    (epoch seconds), as "server verb resource/name". Given a test's ``namespace``,
    requests in another test's namespace are left out: what an earlier test left in a
    namespace deleted but never emptied (no namespace controller runs), the controller
    may still be trying to write there (each create refused, the namespace Terminating)."""
    found = []
    for server in servers:
        for event in server.audit_events():
            if event["user"]["username"] not in users or event["verb"] not in verbs:
                continue
            ref = event.get("objectRef", {})
            if namespace is not None and _another_tests(ref.get("namespace"), namespace):
                continue
            stamp = event.get("requestReceivedTimestamp", "")
            if datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp() >= since:
                found.append(
                    f"{server.name} {event['verb']} {ref.get('resource')}/{ref.get('name')}"
                )
    return found


def _another_tests(namespace: str | None, ours: str) -> bool:
    return (
        namespace is not None and namespace.startswith(TEST_NAMESPACE_PREFIX) and namespace != ours
    )


def writes_by(
    servers: Iterable[Server], users: set[str], since: float, namespace: str | None = None
) -> list[str]:
    return requests_by(servers, users, since, WRITE_VERBS, namespace)


def metric(text: str, name: str) -> float:
    for line in text.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def log_records(controller: ControllerProcess, event: str) -> list[Obj]:
    """The controller's JSON log records of ``event`` so far, oldest first."""
    found = []
    for line in controller.log_text().splitlines():
        if f'"{event}"' not in line:
            continue
        with contextlib.suppress(ValueError):
            record = json.loads(line)
            if isinstance(record, dict) and record.get("event") == event:
                found.append(record)
    return found


def reconciles(controller: ControllerProcess, kind: str, key: str) -> int:
    """How many reconciles of ``kind`` ("cluster" or "crs") ``key`` ("ns/name") the
    controller has finished, from its debug log."""
    records = log_records(controller, "reconciled")
    return sum(r.get("kind") == kind and r.get("key") == key for r in records)


def until_no_conflict(change: Callable[[], object]) -> None:
    """Run ``change`` (a read-modify-write) again while it meets a 409 Conflict: the
    controller may write the same object in between."""

    def attempt() -> bool:
        try:
            change()
        except KubeError as exc:
            if exc.status != 409:
                raise
            return False
        return True

    wait_for(attempt, TIMEOUT)


def audit_caught_up(servers: Iterable[Server]) -> None:
    """Wait until each server's audit log holds a request made now. A server writes a
    request's entry just after its response, so the entries of the requests answered
    before this one are in the log once its own is: a test that asserts a request was
    not made reads the log after this, never after a sleep."""
    servers = list(servers)
    mark = unique("audit-mark")
    for server in servers:
        with TestbedClient(server) as client:
            client.get("v1", "Namespace", mark)  # 404, audited all the same

    def logged(server: Server) -> bool:
        return any(e.get("objectRef", {}).get("name") == mark for e in server.audit_events())

    for server in servers:
        wait_for(lambda s=server: logged(s), TIMEOUT, message=f"{server.name}'s audit log")


def dumps(obj: Any) -> str:
    return json.dumps(obj, indent=1, sort_keys=True)[:3000]


def deployment(name: str, replicas: int = 1) -> Obj:
    """A Deployment in default; the test bed runs no controller, so it stays
    unavailable until a test says otherwise (``available``)."""
    labels = {"app": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {"containers": [{"name": "app", "image": "example.invalid/app:1"}]},
            },
        },
    }


def available(live: Obj) -> Obj:
    """The status a Deployment controller writes once ``live`` is rolled out and
    available (for the status subresource)."""
    replicas = live["spec"].get("replicas", 1)
    return {
        "observedGeneration": live["metadata"]["generation"],
        "replicas": replicas,
        "updatedReplicas": replicas,
        "readyReplicas": replicas,
        "availableReplicas": replicas,
        "conditions": [
            {"type": "Available", "status": "True", "reason": "MinimumReplicasAvailable"},
            {"type": "Progressing", "status": "True", "reason": "NewReplicaSetAvailable"},
        ],
    }


HOOKS = "/hooks.runtime.cluster.x-k8s.io/v1alpha1"


def job(name: str) -> dict:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "drain", "image": "example.invalid/drain:1"}],
                }
            }
        },
    }


def hook(controller: ControllerProcess, cluster: dict) -> dict:
    context = ssl.create_default_context(cadata=controller.extension_ca_pem.decode())
    request = {
        "apiVersion": "hooks.runtime.cluster.x-k8s.io/v1alpha1",
        "kind": "BeforeClusterDeleteRequest",
        "cluster": cluster,
    }
    url = controller.extension_url(f"{HOOKS}/beforeclusterdelete/before-cluster-delete")
    response = httpx.post(url, json=request, verify=context, timeout=10)
    response.raise_for_status()
    return response.json()


# An annotation tests put on Clusters to keep them from going away while they look.
HOLD = "test.crs.dev/hold"


def clear_leases(mgmt: TestbedClient) -> None:
    """Remove every leader and shard Lease, so replicas started next begin alone."""
    for lease in mgmt.list("coordination.k8s.io/v1", "Lease", SYSTEM_NAMESPACE):
        mgmt.delete("coordination.k8s.io/v1", "Lease", lease["metadata"]["name"], SYSTEM_NAMESPACE)


def shard_metric(process: ControllerProcess, name: str) -> float:
    return metric(httpx.get(process.url("/metrics"), timeout=5).text, name)


def loose_crd(group: str, kind: str, *, status: bool = False) -> Obj:
    """A namespaced CRD of ``kind`` in ``group``, v1, keeping any field (with a status
    subresource when ``status``)."""
    plural = kind.lower() + "s"
    version: Obj = {
        "name": "v1",
        "served": True,
        "storage": True,
        "schema": {
            "openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
        },
    }
    if status:
        version["subresources"] = {"status": {}}
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{group}"},
        "spec": {
            "group": group,
            "names": {"kind": kind, "plural": plural, "singular": kind.lower()},
            "scope": "Namespaced",
            "versions": [version],
        },
    }
