"""A kind the management cluster does not serve is told apart from a missing object:
``diff`` (its ClusterResourceSet, its Cluster) and the commands reading one CRS
(``history``, ``approve``, ``rollback``) say the kind is not served and ask whether
its CRD is installed, as a LIST of that kind says it (exit 2), instead of "not
found" — a kubeconfig or context naming a workload cluster, or a server without
Cluster API, is not an object missing. A served kind without the object is still
"not found" (exit 2)."""

from __future__ import annotations

from typing import Any

import pytest

from crs_controller.app.cli import main
from crs_controller.app.commands.common import ERROR, UsageError, get_crs
from crs_controller.clients.api import ResourceInfo
from crs_controller.clients.discovery import Discovery
from crs_controller.core.api.models import (
    API_VERSION,
    CLUSTER_RESOURCE_SET_BINDING_KIND,
    CLUSTER_RESOURCE_SET_KIND,
)
from crs_controller.core.errors import NotFound

from .memory_kube import CLUSTER_API, MemoryKube

CRS_KINDS = (CLUSTER_RESOURCE_SET_KIND, CLUSTER_RESOURCE_SET_BINDING_KIND)
CORE_KINDS = ("Secret", "ConfigMap")


class Served(MemoryKube):
    """A management cluster whose kinds are found as a client finds them (its
    discovery), serving only the group-versions in ``served``."""

    def __init__(self, served: dict[str, tuple[str, ...]]) -> None:
        super().__init__("management cluster")

        async def listing(path: str) -> dict[str, Any]:
            for api_version, kinds in served.items():
                base = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
                if path == base:
                    return {"resources": [_resource(kind) for kind in kinds]}
            # What kube-apiserver answers for a group-version it does not serve.
            raise NotFound(f"GET {path}: 404", status=404)

        self._discovery = Discovery(self.name, listing)
        self._preferred = {v.partition("/")[0]: v for v in served if "/" in v}

    async def resource_info(self, api_version: str, kind: str) -> ResourceInfo:
        return await self._discovery.resource_info(api_version, kind)

    async def preferred_version(self, group: str) -> str | None:
        return self._preferred.get(group)


def _resource(kind: str) -> dict[str, Any]:
    plural = kind.lower() + "s"
    return {"name": plural, "kind": kind, "namespaced": True, "verbs": ["get", "list"]}


def workload() -> Served:
    """A workload cluster's API server: no ClusterResourceSets, no Cluster API."""
    return Served({"v1": CORE_KINDS})


def without_cluster_api() -> Served:
    """A server with this project's CRDs and a CRS default/demo, but no Cluster API."""
    kube = Served({"v1": CORE_KINDS, API_VERSION: CRS_KINDS})
    kube.objects[(API_VERSION, CLUSTER_RESOURCE_SET_KIND, "default", "demo")] = crs_object("demo")
    return kube


def crs_object(name: str) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": CLUSTER_RESOURCE_SET_KIND,
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"clusterSelector": {}, "resources": [{"kind": "ConfigMap", "name": "addon"}]},
    }


def command(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, kube: Served, *argv: str
) -> tuple[int, str]:
    """``crs-controller argv -n default`` against ``kube``: the exit code and stderr."""
    for module in ("diff", "history"):
        monkeypatch.setattr(f"crs_controller.app.commands.{module}.management", lambda _: kube)
    code = main([*argv, "-n", "default"])
    return code, capsys.readouterr().err


def test_diff_against_a_cluster_without_the_crd_says_it_is_not_served(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    code, err = command(capsys, monkeypatch, workload(), "diff", "demo", "--cluster", "workload-0")
    assert code == ERROR
    assert f"{API_VERSION} is not served: is its CRD installed?" in err
    assert "not found" not in err


def test_diff_against_a_server_without_cluster_api_says_cluster_is_not_served(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    kube = without_cluster_api()
    code, err = command(capsys, monkeypatch, kube, "diff", "demo", "--cluster", "x")
    assert code == ERROR
    assert "no kind Cluster in cluster.x-k8s.io/" in err
    assert "is not served: is its CRD installed?" in err
    assert "Cluster default/x not found" not in err


def test_history_against_a_cluster_without_the_crd_says_it_is_not_served(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    code, err = command(capsys, monkeypatch, workload(), "history", "demo")
    assert code == ERROR
    assert f"{API_VERSION} is not served: is its CRD installed?" in err


async def test_a_served_kind_without_the_object_is_not_found() -> None:
    served = Served({"v1": CORE_KINDS, API_VERSION: CRS_KINDS, CLUSTER_API: ("Cluster",)})
    with pytest.raises(UsageError, match="ClusterResourceSet default/demo not found"):
        await get_crs(served, "default", "demo")  # type: ignore[arg-type]
