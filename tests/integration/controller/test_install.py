"""Installing config/ as an operator would, on the real test servers.

A kustomize overlay that moves the controller to another namespace (and renames it
with a prefix) leaves nothing behind in crs-system: the admission policy lets the
moved ServiceAccount write ClusterResourceSetBindings and refuses everyone else,
the old ServiceAccount included, and the ExtensionConfig points at the moved Service
and its CA Secret. The shipped RBAC (config/rbac) runs a full reconcile, a Secret
resource included, without one refused request, and the replica is told apart by its
pod name: the leader Lease's holder and the User-Agent on both servers. The
namespaced variant (config/namespaced, Roles only) runs a controller started as its
Deployment says (--namespace $(POD_NAMESPACE)) through a full reconcile without a
refused request and without one request outside its namespace (its extension
answers a hook for a Cluster of another namespace "nothing to do"), and its own
policy refuses other binding writers there, and anyone but the controller a shard
set's contribution ConfigMap (created, relabelled or deleted), while a tenant's
other ConfigMaps stay open; likewise the leader Lease and the shard members' Leases
(by name or label: created, taken over or deleted), which the namespace controller
still deletes, while a tenant's other Leases stay open. Two namespaced installs with
config/namespaced-extension register two ExtensionConfigs, each named after its
namespace and selecting only it. hack/release.py renders config/default and
config/extension (its kustomize var included) exactly as kustomize does."""

from __future__ import annotations

import contextlib
import importlib.util
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from crs_controller.core.membership.lease import INCARNATION_ANNOTATION
from crs_controller.core.membership.shard import LEASE_PREFIX, lease_name
from crs_controller.engine.runtime.membership import LEADER_LEASE, MEMBER_LABEL
from crs_controller.testbed import ControlPlane, Server, TestbedClient, wait_for
from crs_controller.testbed.controller import (
    SA_USER,
    SYSTEM_NAMESPACE,
    ControllerProcess,
    install_rbac,
)

from .installing import (
    CONFIG,
    REFUSED,
    binding_obj,
    binding_writer_rbac,
    build,
    described,
    install,
    one,
    overlay,
    refused,
    requests_of,
    try_create,
    uninstall,
    writer_rbac,
)
from .support import (
    TIMEOUT,
    WORKLOAD_USER,
    add_cluster,
    audit_caught_up,
    configmap_obj,
    crs_obj,
    hook,
    manifests,
    source_configmap,
    source_secret,
    unique,
    wait_condition,
    wait_object,
)

LEASE_GROUP = "coordination.k8s.io"
LEASE_API = f"{LEASE_GROUP}/v1"
NAMESPACE_CONTROLLER = "system:serviceaccount:kube-system:namespace-controller"
COLLECTOR = "system:serviceaccount:kube-system:generic-garbage-collector"
RELEASE_SCRIPT = CONFIG.parent / "hack" / "release.py"
Obj = dict[str, Any]


def test_the_release_renders_config_as_kustomize_does() -> None:
    spec = importlib.util.spec_from_file_location("release", RELEASE_SCRIPT)
    assert spec is not None and spec.loader is not None
    release = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(release)
    for base in ("default", "extension"):
        assert release.render(CONFIG / base) == build(CONFIG / base), base


def _strings(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        for value in node.values():
            yield from _strings(value)
    elif isinstance(node, list):
        for value in node:
            yield from _strings(value)
    elif isinstance(node, str):
        yield node


def test_a_namespace_overlay_leaves_nothing_in_crs_system(tmp_path: Path) -> None:
    bases = ["default", "extension"]
    documents = build(overlay(tmp_path, bases, namespace="addons", namePrefix="team-"))
    for document in documents:
        leftovers = [s for s in _strings(document) if "crs-system" in s]
        assert leftovers == [], (document["kind"], leftovers)
    service, extension = one(documents, "Service"), one(documents, "ExtensionConfig")
    assert extension["spec"]["clientConfig"]["service"] == {
        "name": service["metadata"]["name"],
        "namespace": "addons",
        "port": 443,
    }
    annotation = "runtime.cluster.x-k8s.io/inject-ca-from-secret"
    assert extension["metadata"]["annotations"][annotation] == (
        "addons/crs-controller-extension-tls"
    )
    # The policies' parameter is the ClusterRoleBinding that now binds the moved
    # ServiceAccount.
    grant = one(documents, "ClusterRoleBinding")
    bindings = [d for d in documents if d["kind"] == "ValidatingAdmissionPolicyBinding"]
    assert len(bindings) == 3
    for policy_binding in bindings:
        assert policy_binding["spec"]["paramRef"]["name"] == grant["metadata"]["name"]
    assert one(documents, "NetworkPolicy")["metadata"]["namespace"] == "addons"
    account = one(documents, "ServiceAccount")["metadata"]
    assert grant["subjects"] == [
        {"kind": "ServiceAccount", "name": account["name"], "namespace": "addons"}
    ]


def test_namespaced_installs_register_an_extension_each_for_their_namespace(
    tmp_path: Path,
) -> None:
    names = {}
    for namespace in ("team-a", "team-b"):
        bases = ["namespaced", "namespaced-extension"]
        documents = build(overlay(tmp_path / namespace, bases, namespace=namespace))
        service, extension = one(documents, "Service"), one(documents, "ExtensionConfig")
        assert extension["spec"]["namespaceSelector"] == {
            "matchLabels": {"kubernetes.io/metadata.name": namespace}
        }
        assert extension["spec"]["clientConfig"]["service"] == {
            "name": service["metadata"]["name"],
            "namespace": namespace,
            "port": 443,
        }
        annotation = "runtime.cluster.x-k8s.io/inject-ca-from-secret"
        assert extension["metadata"]["annotations"][annotation] == (
            f"{namespace}/crs-controller-extension-tls"
        )
        # What the documented removal of one install deletes by label.
        for kept in (service, extension):
            assert kept["metadata"]["labels"]["app.kubernetes.io/name"] == "crs-controller"
        names[namespace] = extension["metadata"]["name"]
    assert names == {"team-a": "crs-controller-team-a", "team-b": "crs-controller-team-b"}


def _confined(namespace: str) -> list[Obj]:
    """An overlay patch keeping the policy to the test's namespace: other tests share
    the server, and their controller is the ServiceAccount that did not move."""
    selector = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}}}
    patch = [{"op": "add", "path": "/spec/matchResources", "value": selector}]
    target = {"kind": "ValidatingAdmissionPolicyBinding"}
    return [{"target": target, "patch": yaml.safe_dump(patch)}]


@pytest.fixture
def writers(
    mgmt: TestbedClient, control_plane: ControlPlane, namespace: str
) -> Iterator[dict[str, TestbedClient]]:
    """Clients for a tenant and for the (unmoved) shipped ServiceAccount, both allowed
    by RBAC to write bindings in ``namespace``."""
    install_rbac(mgmt)
    tenant = unique("tenant")
    rbac = binding_writer_rbac(namespace, tenant)
    for obj in rbac:
        mgmt.apply(obj)
    clients = {
        "tenant": TestbedClient(control_plane.management.kubeconfig(tenant, ())),
        "unmoved": TestbedClient(control_plane.management.kubeconfig(SA_USER, ())),
    }
    yield clients
    for client in clients.values():
        client.close()
    uninstall(mgmt, rbac)


def test_the_binding_policy_follows_a_moved_service_account(
    tmp_path: Path,
    mgmt: TestbedClient,
    control_plane: ControlPlane,
    namespace: str,
    writers: dict[str, TestbedClient],
) -> None:
    moved, prefix = unique("moved"), f"{unique('m')}-"
    fields = {"namespace": moved, "namePrefix": prefix, "patches": _confined(namespace)}
    installed = install(mgmt, build(overlay(tmp_path, ["default"], **fields)))
    user = f"system:serviceaccount:{moved}:{prefix}crs-controller"
    try:
        probe = binding_obj(namespace, "probe")
        wait_for(
            lambda: REFUSED in try_create(writers["tenant"], probe, dry_run=True).text,
            TIMEOUT,
            message="the moved policy in force",
        )
        with TestbedClient(control_plane.management.kubeconfig(user, ())) as controller:
            created = try_create(controller, binding_obj(namespace, "by-moved"))
        assert created.status_code == 201, created.text
        for who in ("tenant", "unmoved"):
            answer = try_create(writers[who], binding_obj(namespace, f"by-{who}"))
            assert answer.status_code == 403, (who, answer.text)
            assert REFUSED in answer.json()["message"]
            assert f"ClusterRoleBinding {prefix}crs-controller" in answer.json()["message"]
    finally:
        uninstall(mgmt, installed)


def _reconcile_fully(
    mgmt: TestbedClient, control_plane: ControlPlane, wl: TestbedClient, namespace: str
) -> None:
    """A Reconcile CRS with a ConfigMap and a resource-set Secret, applied to a
    Cluster reached through its kubeconfig Secret, until the CRS is Ready."""
    tag = unique("install")
    addons = [unique("from-configmap"), unique("from-secret")]
    mgmt.create(source_configmap(namespace, "addon", {"a": manifests(configmap_obj(addons[0]))}))
    mgmt.create(source_secret(namespace, "secret", {"b": manifests(configmap_obj(addons[1]))}))
    sources = [("ConfigMap", "addon"), ("Secret", "secret")]
    mgmt.create(crs_obj(namespace, "install", sources, {"install": tag}, mode="Reconcile"))
    add_cluster(mgmt, control_plane.workloads[0], namespace, tag, {"install": tag})
    wait_condition(mgmt, namespace, "install", "Ready", "True")
    for name in addons:
        wait_object(wl, "v1", "ConfigMap", name, "default")


def test_the_shipped_rbac_reconciles_without_a_refusal_and_names_the_replica(
    controller: ControllerProcess,
    mgmt: TestbedClient,
    control_plane: ControlPlane,
    workload_clients: list[TestbedClient],
    namespace: str,
) -> None:
    install_rbac(mgmt)
    mgmt.delete(LEASE_API, "Lease", "crs-controller", SYSTEM_NAMESPACE)
    pod = f"crs-controller-{uuid.uuid4().hex[:5]}-rbac"
    since = time.time()
    # The session's controller stands aside: had it applied the set first, this
    # replica would find everything in place and send nothing to the workload.
    controller.stop()
    try:
        with ControllerProcess(control_plane.management, "--leader-elect", env={"POD_NAME": pod}):
            _reconcile_fully(mgmt, control_plane, workload_clients[0], namespace)
            lease = mgmt.get(LEASE_API, "Lease", "crs-controller", SYSTEM_NAMESPACE)
            assert lease is not None and lease["spec"]["holderIdentity"] == pod
    finally:
        controller.start()
    audit_caught_up([control_plane.management, control_plane.workloads[0]])
    events = requests_of(control_plane.management, SA_USER, since)
    assert refused(events) == []
    ours = [e for e in events if e.get("userAgent", "").endswith(f"({pod})")]
    assert ours, "no request named the pod in its User-Agent"
    assert all(e["userAgent"].startswith("crs-controller/") for e in ours)
    applied = requests_of(control_plane.workloads[0], WORKLOAD_USER, since)
    assert any(e.get("userAgent", "").endswith(f"({pod})") for e in applied)


def _deployment_args(documents: list[Obj], namespace: str) -> list[str]:
    """The manager's arguments as the kubelet would pass them, without ``run`` and
    without the pod's listening addresses (the test bed gives the process free
    loopback ports)."""
    container = one(documents, "Deployment")["spec"]["template"]["spec"]["containers"][0]
    args = [a.replace("$(POD_NAMESPACE)", namespace) for a in container["args"]]
    assert args[0] == "run"
    listening = ("--metrics-addr=", "--health-addr=")
    return [a for a in args[1:] if not a.startswith(listening)]


def test_the_namespaced_variant_reconciles_inside_its_namespace_only(
    tmp_path: Path,
    mgmt: TestbedClient,
    control_plane: ControlPlane,
    workload_clients: list[TestbedClient],
    namespace: str,
    writers: dict[str, TestbedClient],
) -> None:
    prefix = f"{unique('n')}-"
    documents = build(overlay(tmp_path, ["namespaced"], namespace=namespace, namePrefix=prefix))
    assert {d["kind"] for d in documents} & {"ClusterRole", "ClusterRoleBinding"} == set()
    installed = install(mgmt, documents)
    user = f"system:serviceaccount:{namespace}:{prefix}crs-controller"
    args = _deployment_args(documents, namespace)
    assert f"--namespace={namespace}" in args
    env = {"POD_NAMESPACE": namespace, "POD_NAME": f"{prefix}crs-controller-0"}
    since = time.time()
    try:
        with ControllerProcess(
            control_plane.management, *args, user=user, env=env, extension=True
        ) as process:
            _reconcile_fully(mgmt, control_plane, workload_clients[0], namespace)
            # config/namespaced-extension has Cluster API call the hooks for this
            # namespace only; one called for a Cluster of another (config/extension,
            # which selects every namespace) is nothing to do, and unread.
            other = hook(process, {"metadata": {"name": "elsewhere", "namespace": "default"}})
            assert other["retryAfterSeconds"] == 0, other
        audit_caught_up([control_plane.management])
        events = requests_of(control_plane.management, user, since)
        assert events and refused(events) == []
        elsewhere = [
            described(e)
            for e in events
            if e.get("objectRef") and e["objectRef"].get("namespace") != namespace
        ]
        assert elsewhere == []
        # Its policy: the tenant, allowed by RBAC, may not write bindings here.
        answer = try_create(writers["tenant"], binding_obj(namespace, "forged"))
        assert answer.status_code == 403, answer.text
        assert f"RoleBinding {namespace}/{prefix}crs-controller" in answer.json()["message"]
    finally:
        uninstall(mgmt, installed)


def _share(namespace: str, name: str, labelled: bool = True) -> Obj:
    """A ConfigMap as a shard set's contribution is (``labelled``) or only named."""
    made = configmap_obj(name, namespace, **{"contribution.json": "{}"})
    if labelled:
        made["metadata"]["labels"] = {"addons.crs.dev/shard-contribution": "0123456789ab"}
    return made


@contextlib.contextmanager
def _namespaced_policy(
    tmp_path: Path, mgmt: TestbedClient, server: Server, probe: Obj, group: str, resource: str
) -> Iterator[tuple[TestbedClient, TestbedClient]]:
    """config/namespaced installed in the namespace of ``probe`` and clients for a
    tenant allowed by RBAC to write ``resource`` there and for the controller's
    ServiceAccount, once the policy refuses the tenant ``probe``."""
    namespace = probe["metadata"]["namespace"]
    prefix = f"{unique('s')}-"
    documents = build(overlay(tmp_path, ["namespaced"], namespace=namespace, namePrefix=prefix))
    installed = install(mgmt, documents)
    tenant = unique("tenant")
    rbac = writer_rbac(namespace, tenant, group, resource)
    for obj in rbac:
        mgmt.apply(obj)
    user = f"system:serviceaccount:{namespace}:{prefix}crs-controller"
    try:
        with (
            TestbedClient(server.kubeconfig(tenant, ())) as forger,
            TestbedClient(server.kubeconfig(user, ())) as controller,
        ):
            wait_for(
                lambda: try_create(forger, probe, dry_run=True).status_code == 403,
                TIMEOUT,
                message="the namespaced policy in force",
            )
            yield forger, controller
    finally:
        uninstall(mgmt, rbac)
        uninstall(mgmt, installed)


def test_the_namespaced_policy_keeps_contributions_to_the_controller(
    tmp_path: Path, mgmt: TestbedClient, control_plane: ControlPlane, namespace: str
) -> None:
    server = control_plane.management
    forged = _share(namespace, "crs-share-0123456789ab-forged")
    with _namespaced_policy(tmp_path, mgmt, server, forged, "", "configmaps") as (
        forger,
        controller,
    ):
        for obj in (
            forged,
            _share(namespace, "other"),
            _share(namespace, "crs-share-x", False),
        ):
            answer = try_create(forger, obj)
            assert answer.status_code == 403, answer.text
            assert "contributions of a shard set" in answer.json()["message"]
        own = try_create(forger, configmap_obj("tenant-own", namespace, key="value"))
        assert own.status_code == 201, own.text
        relabelled = {**own.json()}
        relabelled["metadata"]["labels"] = {"addons.crs.dev/shard-contribution": "x"}
        path = forger.path("v1", "ConfigMap", "tenant-own", namespace)
        assert forger.http.put(path, json=relabelled).status_code == 403
        written = try_create(controller, _share(namespace, "crs-share-0123456789ab-real"))
        assert written.status_code == 201, written.text
        share = forger.path("v1", "ConfigMap", "crs-share-0123456789ab-real", namespace)
        assert forger.http.delete(share).status_code == 403
        assert controller.http.delete(share).status_code == 200


def _lease(namespace: str, name: str, *, member: bool = False, generated: bool = False) -> Obj:
    """A Lease named ``name`` (or generated from it), labelled and annotated as a shard
    member's (``member``) or not."""
    metadata: Obj = {"namespace": namespace, "generateName" if generated else "name": name}
    if member:
        metadata["labels"] = {MEMBER_LABEL: "true"}
        metadata["annotations"] = {INCARNATION_ANNOTATION: "0123456789abcdef" * 2}
    spec = {"holderIdentity": name, "leaseDurationSeconds": 15}
    return {"apiVersion": LEASE_API, "kind": "Lease", "metadata": metadata, "spec": spec}


def _refused_lease(answer: httpx.Response) -> None:
    assert answer.status_code == 403, answer.text
    assert "may write or delete its Leases" in answer.json()["message"]


def test_the_namespaced_policy_keeps_the_controllers_leases_to_it(
    tmp_path: Path, mgmt: TestbedClient, control_plane: ControlPlane, namespace: str
) -> None:
    server = control_plane.management
    member = lease_name("replica-0")
    forged = _lease(namespace, lease_name("forged"), member=True)
    with (
        _namespaced_policy(tmp_path, mgmt, server, forged, LEASE_GROUP, "leases") as (
            forger,
            controller,
        ),
        TestbedClient(server.kubeconfig(NAMESPACE_CONTROLLER, ())) as cleaner,
    ):
        for obj in (
            forged,
            _lease(namespace, LEADER_LEASE),
            _lease(namespace, lease_name("unlabelled")),
            _lease(namespace, LEASE_PREFIX, generated=True),
            _lease(namespace, "other", member=True),
        ):
            _refused_lease(try_create(forger, obj))
        for name, labelled in ((LEADER_LEASE, False), (member, True)):
            written = try_create(controller, _lease(namespace, name, member=labelled))
            assert written.status_code == 201, written.text
            taken = {**written.json(), "spec": {"holderIdentity": "tenant"}}
            path = forger.path(LEASE_API, "Lease", name, namespace)
            _refused_lease(forger.http.put(path, json=taken))
            _refused_lease(forger.http.delete(path))
        _tenant_lease_stays_open(forger, namespace)
        # Deleting a namespace deletes its Leases; the controller deletes its own.
        path = cleaner.path(LEASE_API, "Lease", member, namespace)
        assert cleaner.http.delete(path).status_code == 200
        _collector_finishes_a_deletion(server, controller, namespace)


def _collector_finishes_a_deletion(
    server: Server, controller: TestbedClient, namespace: str
) -> None:
    """The garbage collector drops the finalizer holding the deleted leader Lease, which
    has no labels or annotations, but may not change its holder."""
    path = controller.path(LEASE_API, "Lease", LEADER_LEASE, namespace)
    held = controller.http.get(path).json()
    held["metadata"]["finalizers"] = ["example.com/hold"]
    assert controller.http.put(path, json=held).status_code == 200
    assert controller.http.delete(path).status_code == 200
    released = controller.http.get(path).json()
    released["metadata"]["finalizers"] = []
    taken = {**released, "spec": {**released["spec"], "holderIdentity": "collector"}}
    with TestbedClient(server.kubeconfig(COLLECTOR, ())) as collector:
        _refused_lease(collector.http.put(path, json=taken))
        answer = collector.http.put(path, json=released)
    assert answer.status_code == 200, answer.text
    assert controller.http.get(path).status_code == 404


def _tenant_lease_stays_open(forger: TestbedClient, namespace: str) -> None:
    """A Lease of the tenant's own is written, renewed and deleted as before, but not
    labelled as a shard member's."""
    own = try_create(forger, _lease(namespace, "tenant-own"))
    assert own.status_code == 201, own.text
    path = forger.path(LEASE_API, "Lease", "tenant-own", namespace)
    relabelled = {**own.json()}
    relabelled["metadata"]["labels"] = {MEMBER_LABEL: "true"}
    _refused_lease(forger.http.put(path, json=relabelled))
    renewed = {**own.json(), "spec": {"holderIdentity": "tenant", "leaseDurationSeconds": 30}}
    answer = forger.http.put(path, json=renewed)
    assert answer.status_code == 200, answer.text
    assert forger.http.delete(path).status_code == 200
