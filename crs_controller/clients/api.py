"""What the engine asks of a Kubernetes API server: the verbs and the discovery it
uses, as a typed protocol.

``clients.kube.KubeClient`` implements it over HTTP; the unit tests' in-memory API
(tests/unit/memory_kube.py) implements it over dicts. The engine depends on this
protocol, never on the HTTP client, so a reconcile decision can be tested without a
server and without casting a fake to ``Any``. Objects are raw API payloads (``Obj``);
failures are ``core.errors`` (``NotFound``, ``Conflict``, ``Unreachable``,
``APIError``), whichever side implements it.
"""

from __future__ import annotations

import builtins
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

__all__ = ["KubeAPI", "Obj", "ResourceInfo", "WorkloadAPIs"]

Obj = dict[str, Any]


@dataclass(frozen=True)
class ResourceInfo:
    """Where a kind lives in the REST tree."""

    api_version: str
    kind: str
    plural: str
    namespaced: bool


class KubeAPI(Protocol):
    """One API server (the management cluster or a workload cluster)."""

    @property
    def name(self) -> str:
        """Which server, for messages: "management cluster", a Cluster's name."""
        ...

    async def close(self) -> None: ...

    # -- discovery --------------------------------------------------------------------

    async def resource_info(self, api_version: str, kind: str) -> ResourceInfo:
        """Plural and scope of a kind; NotFound when the server does not serve it."""
        ...

    def forget_discovery(self, api_version: str) -> None:
        """Discover ``api_version`` again when next asked (a CRD changed)."""
        ...

    async def preferred_version(self, group: str) -> str | None:
        """The server's preferred ``group/version`` of an API group; None if not served."""
        ...

    async def served_versions(self, group: str) -> list[str]:
        """Every ``group/version`` the server serves of an API group, its preferred
        first; none if it serves the group no more (the core group "": ``v1``)."""
        ...

    async def path(
        self, api_version: str, kind: str, namespace: str | None = None, name: str | None = None
    ) -> str:
        """The REST path of a kind, or of one object."""
        ...

    # -- verbs ------------------------------------------------------------------------

    async def get(
        self, api_version: str, kind: str, name: str, namespace: str | None = None
    ) -> Obj | None:
        """The object, or None when there is none."""
        ...

    async def list(
        self,
        api_version: str,
        kind: str,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        metadata_only: bool = False,
    ) -> tuple[builtins.list[Obj], str]:
        """Every item, and the list's resourceVersion (to start a watch from)."""
        ...

    def pages(
        self,
        api_version: str,
        kind: str,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        metadata_only: bool = False,
    ) -> AsyncIterator[tuple[builtins.list[Obj], str]]:
        """The same items as ``list``, one page at a time, each with the list's
        resourceVersion ("" until the last page): a caller that keeps what it makes
        of each page holds one page of JSON at a time, never the whole list's."""
        ...

    def watch(
        self,
        api_version: str,
        kind: str,
        namespace: str | None,
        resource_version: str,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        metadata_only: bool = False,
    ) -> AsyncIterator[tuple[str, Obj]]:
        """(type, object) events from ``resource_version`` on, until the server ends
        the watch; a 410 Gone arrives as an ERROR event."""
        ...

    async def create(self, obj: Mapping[str, Any]) -> Obj: ...

    async def replace(self, obj: Mapping[str, Any], *, subresource: str | None = None) -> Obj:
        """PUT with the object's resourceVersion: Conflict if it changed meanwhile."""
        ...

    async def merge_patch(
        self,
        api_version: str,
        kind: str,
        name: str,
        namespace: str | None,
        patch: Mapping[str, Any],
    ) -> Obj:
        """JSON merge patch; with ``metadata.resourceVersion`` in it, Conflict on a race."""
        ...

    async def apply(
        self,
        obj: Mapping[str, Any],
        *,
        field_manager: str,
        force: bool = True,
        dry_run: bool = False,
    ) -> Obj:
        """Server-side apply of one object as ``field_manager``."""
        ...

    async def delete(
        self,
        api_version: str,
        kind: str,
        name: str,
        namespace: str | None = None,
        *,
        uid: str | None = None,
        resource_version: str | None = None,
    ) -> bool:
        """Delete; False when it was already gone. With ``uid``, only that very object;
        with ``resource_version``, only that version of it (Conflict on a race)."""
        ...


class WorkloadAPIs(Protocol):
    """The workload clusters' API servers, one per Cluster, built from its kubeconfig
    Secret (``clients.workload.WorkloadClients``)."""

    async def get(self, namespace: str, cluster: str, secret: Mapping[str, Any]) -> KubeAPI:
        """The Cluster's API; raises when its kubeconfig cannot be used."""
        ...

    async def forget(self, namespace: str, cluster: str) -> None:
        """Drop (and close) the Cluster's client: it is deleted, or no longer ours."""
        ...
