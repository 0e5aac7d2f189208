"""Applying to a workload cluster whose discovery the client cached before the server
changed: a 404 for the resource path is asked of discovery once more before it is
reported, so an object whose kind moved (another scope) is applied where it lives now,
one whose apiVersion is served no more is reported as not served, and a 404 about the
object itself is reported as it was answered. A CRD whose Established condition cannot
be read fails alone: the objects after it still go out. With ApplyOnce, an object
another resource of the CRS recorded (the previous build of a version-following
add-on) is applied, not adopted unsent."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import yaml

from crs_controller.clients.api import Obj, ResourceInfo
from crs_controller.core.errors import APIError, NotFound
from crs_controller.engine.reconcile.workload.applying import apply_objects
from tests.addons import ADDONS, needs_addons

from .memory_kube import MemoryKube

MANAGER = "crs-controller"
GIZMO = {"apiVersion": "x.io/v1", "kind": "Gizmo", "metadata": {"name": "g", "namespace": "a"}}


class CachedDiscovery(MemoryKube):
    """Gizmos are served cluster-scoped now, and x.io/v1alpha1 is served no more; the
    client discovered both before and answers so until discovery is forgotten. A
    request through a path the server does not serve is a 404, as kube-apiserver's."""

    def __init__(self) -> None:
        super().__init__("w1")
        self.cluster_scoped.add("Gizmo")
        self.stale = {"x.io/v1", "x.io/v1alpha1"}
        self.forgotten: list[str] = []

    async def resource_info(self, api_version: str, kind: str) -> ResourceInfo:
        if api_version == "x.io/v1alpha1" and api_version not in self.stale:
            raise NotFound(f"w1: no kind {kind} in {api_version} (not served)", status=404)
        info = await super().resource_info(api_version, kind)
        return replace(info, namespaced=True) if api_version in self.stale else info

    def forget_discovery(self, api_version: str) -> None:
        self.forgotten.append(api_version)
        self.stale.discard(api_version)

    async def apply(self, obj: Mapping[str, Any], **kwargs: Any) -> Obj:
        meta = obj["metadata"]
        if obj["apiVersion"] == "x.io/v1alpha1" or (
            obj["kind"] in self.cluster_scoped and meta.get("namespace")
        ):
            raise NotFound(f"w1: PATCH {obj['kind']}/{meta['name']}: 404 (not served)", status=404)
        return await super().apply(obj, **kwargs)


async def test_a_kind_served_in_another_scope_since_discovered_is_applied_there() -> None:
    kube = CachedDiscovery()
    result = await apply_objects(kube, [GIZMO], field_manager=MANAGER, only_missing=False)
    assert result.ok, result.errors
    assert [(r.kind, r.namespace, r.name) for r in result.applied.values()] == [("Gizmo", "", "g")]
    assert ("x.io/v1", "Gizmo", "", "g") in kube.objects
    assert kube.forgotten == ["x.io/v1"]


async def test_an_api_version_served_no_more_is_reported_as_such() -> None:
    kube = CachedDiscovery()
    old = {**GIZMO, "apiVersion": "x.io/v1alpha1"}
    result = await apply_objects(kube, [old], field_manager=MANAGER, only_missing=False)
    assert result.applied == {}
    assert result.errors == [
        "x.io/v1alpha1 Gizmo a/g: w1: no kind Gizmo in x.io/v1alpha1 (not served)"
    ]
    assert kube.forgotten == ["x.io/v1alpha1"]


async def test_a_404_about_the_object_is_reported_as_answered() -> None:
    kube = MemoryKube("w1")
    kube.fail_with = NotFound('w1: PATCH: 404 NotFound: namespaces "a" not found', status=404)
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "a"}}
    result = await apply_objects(kube, [cm], field_manager=MANAGER, only_missing=False)
    assert result.errors == ['v1 ConfigMap a/c: w1: PATCH: 404 NotFound: namespaces "a" not found']
    assert [verb for verb, _ in kube.requests] == ["apply"]  # not sent twice


def addon(name: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((ADDONS / name).read_text()) if d]


class CRDsForbidden(MemoryKube):
    """Applies anything, but refuses to show a CustomResourceDefinition (403)."""

    async def get(
        self, api_version: str, kind: str, name: str, namespace: str | None = None
    ) -> Obj | None:
        if kind == "CustomResourceDefinition":
            raise APIError(f"w1: GET {kind}/{name}: 403 Forbidden", status=403)
        return await super().get(api_version, kind, name, namespace)


@needs_addons
async def test_a_crd_whose_condition_cannot_be_read_fails_alone() -> None:
    kube = CRDsForbidden("w1")
    (crd,) = addon("velero-backupstoragelocations-crd.yaml")
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "a"}}
    result = await apply_objects(kube, [crd, cm], field_manager=MANAGER, only_missing=False)
    assert result.errors == [
        "CustomResourceDefinition backupstoragelocations.velero.io: not known to be "
        "Established: w1: GET CustomResourceDefinition/backupstoragelocations.velero.io: "
        "403 Forbidden"
    ]
    assert [(r.kind, r.name) for r in result.applied.values()] == [
        ("CustomResourceDefinition", "backupstoragelocations.velero.io"),
        ("ConfigMap", "c"),
    ]
    assert ("v1", "ConfigMap", "a", "c") in kube.objects


@needs_addons
async def test_applyonce_sends_the_objects_another_build_recorded() -> None:
    kube = MemoryKube("w1")
    old, new = addon("vsphere-cpi-v1.33.yaml"), addon("vsphere-cpi-v1.34.yaml")
    first = await apply_objects(kube, old, field_manager=MANAGER, only_missing=True)
    assert first.ok and len(first.applied) == len(old)
    recorded = list(first.applied.values())
    kube.requests.clear()
    result = await apply_objects(
        kube, new, field_manager=MANAGER, only_missing=True, claimed=recorded
    )
    assert result.ok and len(result.applied) == len(new) and not result.skipped
    assert len(kube.writes()) == len(new)
    daemonset = await kube.get(
        "apps/v1", "DaemonSet", "vsphere-cloud-controller-manager", "kube-system"
    )
    assert daemonset is not None
    (container,) = daemonset["spec"]["template"]["spec"]["containers"]
    assert container["image"].endswith(":v1.34.0")


@needs_addons
async def test_applyonce_readopts_what_it_applied_when_no_resource_records_it() -> None:
    # A lost inventory: nothing is sent, what our manager applied is taken back.
    kube = MemoryKube("w1")
    old, new = addon("vsphere-cpi-v1.33.yaml"), addon("vsphere-cpi-v1.34.yaml")
    await apply_objects(kube, old, field_manager=MANAGER, only_missing=True)
    kube.requests.clear()
    result = await apply_objects(kube, new, field_manager=MANAGER, only_missing=True)
    assert len(result.applied) == len(new) and kube.writes() == []
