"""Helpers for the install tests: config/ built through a kustomize overlay (with
whichever kustomize hack/kustomize.sh finds or builds), applied to the test
management server as kubectl would, and the audit log read for refused requests."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterable
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import yaml

from crs_controller.testbed import Server, TestbedClient

REPO_ROOT = Path(__file__).resolve().parents[3]
CONFIG = REPO_ROOT / "config"
KUSTOMIZE = REPO_ROOT / "hack" / "kustomize.sh"
# What an install test puts on the server: no CRDs (the session has them), no
# Deployment (no kubelet runs it: the test starts the process itself).
INSTALLED_KINDS = {
    "Namespace",
    "ServiceAccount",
    "ClusterRole",
    "ClusterRoleBinding",
    "Role",
    "RoleBinding",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
}
REFUSED = "only the crs-controller ServiceAccount may create or update"

Obj = dict[str, Any]


def overlay(directory: Path, bases: Iterable[str], **fields: Any) -> Path:
    """A kustomization in ``directory`` over the config/ ``bases`` (kustomize takes
    relative paths only), with ``fields`` (namespace, namePrefix, patches…)."""
    directory.mkdir(parents=True, exist_ok=True)
    resources = [os.path.relpath(CONFIG / base, directory) for base in bases]
    body = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": resources,
        **fields,
    }
    (directory / "kustomization.yaml").write_text(yaml.safe_dump(body))
    return directory


def build(directory: Path) -> list[Obj]:
    """``kustomize build directory``, as objects. The first build on a machine without
    kustomize or kubectl compiles kustomize (minutes, once)."""
    done = subprocess.run(
        ["bash", str(KUSTOMIZE), str(directory)],
        capture_output=True,
        text=True,
        timeout=1800,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return [d for d in yaml.safe_load_all(done.stdout) if d]


def one(documents: list[Obj], kind: str) -> Obj:
    (found,) = [d for d in documents if d["kind"] == kind]
    return found


def install(mgmt: TestbedClient, documents: list[Obj]) -> list[Obj]:
    """Apply the RBAC and admission objects as ``kubectl apply`` would: a namespace
    kustomize put on a cluster-scoped object it does not know (the admission policy)
    is dropped, as kubectl drops it by the server's own discovery."""
    installed = []
    for document in documents:
        if document["kind"] not in INSTALLED_KINDS:
            continue
        _, namespaced = mgmt.resource(document["apiVersion"], document["kind"])
        if not namespaced:
            document["metadata"].pop("namespace", None)
        mgmt.apply(document)
        installed.append(document)
    return installed


def uninstall(mgmt: TestbedClient, documents: list[Obj]) -> None:
    for document in reversed(documents):
        meta = document["metadata"]
        mgmt.delete(document["apiVersion"], document["kind"], meta["name"], meta.get("namespace"))


def binding_obj(namespace: str, name: str) -> Obj:
    return {
        "apiVersion": "addons.crs.dev/v1alpha1",
        "kind": "ClusterResourceSetBinding",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"clusterName": name, "bindings": []},
    }


def try_create(client: TestbedClient, obj: Obj, *, dry_run: bool = False) -> httpx.Response:
    path = client.path(obj["apiVersion"], obj["kind"], namespace=obj["metadata"]["namespace"])
    return client.http.post(path, params={"dryRun": "All"} if dry_run else {}, json=obj)


def binding_writer_rbac(namespace: str, user: str) -> list[Obj]:
    """RBAC that lets ``user`` write bindings in ``namespace``: what stops it must be
    the admission policy."""
    return writer_rbac(namespace, user, "addons.crs.dev", "clusterresourcesetbindings")


def writer_rbac(namespace: str, user: str, group: str, resource: str) -> list[Obj]:
    """RBAC that lets ``user`` get, create, update and delete ``resource`` of API
    ``group`` in ``namespace``."""
    rbac = "rbac.authorization.k8s.io"
    name = f"test-{resource}-writer-{user}".replace(":", "-")
    meta = {"name": name, "namespace": namespace}
    rules = [
        {
            "apiGroups": [group],
            "resources": [resource],
            "verbs": ["get", "create", "update", "delete"],
        }
    ]
    return [
        {"apiVersion": f"{rbac}/v1", "kind": "Role", "metadata": meta, "rules": rules},
        {
            "apiVersion": f"{rbac}/v1",
            "kind": "RoleBinding",
            "metadata": meta,
            "roleRef": {"apiGroup": rbac, "kind": "Role", "name": name},
            "subjects": [{"apiGroup": rbac, "kind": "User", "name": user}],
        },
    ]


def requests_of(server: Server, user: str, since: float) -> list[Obj]:
    """Audit events of ``user``'s requests received since ``since`` (epoch seconds)."""
    found = []
    for event in server.audit_events():
        if event["user"]["username"] != user:
            continue
        stamp = event.get("requestReceivedTimestamp", "")
        if datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp() >= since:
            found.append(event)
    return found


def described(event: Obj) -> str:
    ref = event.get("objectRef") or {}
    what = f"{ref.get('namespace', '')}/{ref.get('resource')}/{ref.get('name', '')}"
    code = (event.get("responseStatus") or {}).get("code")
    return f"{event['verb']} {what if ref else event.get('requestURI')} -> {code}"


def refused(events: Iterable[Obj]) -> list[str]:
    """The requests the server answered 401 or 403 for want of rights. Not a create in
    a namespace being deleted (another test's, going away: the server answers 403
    whoever asks)."""
    return [described(e) for e in events if _refused_rights(e.get("responseStatus") or {})]


def _refused_rights(status: Obj) -> bool:
    terminating = "being terminated" in str(status.get("message") or "")
    return status.get("code") in (401, 403) and not terminating
