"""Where a kind lives on a server: its plural and scope, discovered once per
group-version and cached, and the REST path of a kind or of one object, every segment
checked so a name from a manifest can only ever name an object of that kind.

What is kept is bounded whatever the server sends: a group-version listing more than
MAX_RESOURCES kinds is refused (AnswerTooLarge), and a client keeps at most
MAX_KEPT_RESOURCES kinds over all its group-versions, the least recently used
group-versions dropped first (discovered again when next asked for).
"""

from __future__ import annotations

import re
import weakref
from collections.abc import Awaitable, Callable
from typing import Any

from crs_controller.clients.api import Obj, ResourceInfo
from crs_controller.core.errors import AnswerTooLarge, InvalidObjectName, NotFound, Unreachable

# RFC 3986 path characters without '%' (no escapes: Kubernetes refuses '%' in names)
# and without '/'; names of built-in kinds are narrower still (DNS subdomains, RBAC's
# ':'), which the server checks. 253 is the longest name Kubernetes accepts.
_SEGMENT = re.compile(r"[A-Za-z0-9._~:@!$&'()*+,;=-]{1,253}")

# Kinds (subresources aside) one group-version may list. No real one comes near: the
# core group's v1 serves about 40, the largest CRD groups a few hundred.
MAX_RESOURCES = 1_000
# Kinds one client keeps, all group-versions together (a few hundred bytes each).
MAX_KEPT_RESOURCES = 2_000


class Discovery:
    """The kinds one server serves, per group-version; ``get``: the client's GET of a
    path, with its credentials, deadline and limits."""

    def __init__(self, name: str, get: Callable[[str], Awaitable[Obj]]) -> None:
        self._name = name
        self._get = get
        self._known: dict[str, dict[str, ResourceInfo]] = {}
        self._unserved: set[str] = set()

    async def resource_info(self, api_version: str, kind: str) -> ResourceInfo:
        """Plural and scope of a kind; rediscovers once on a miss (a CRD may be new)."""
        known = self._known.pop(api_version, None)
        if known is not None:
            self._known[api_version] = known  # the most recently used, last
        if known is None or kind not in known:
            known = await self._discover(api_version)
        if kind not in known:
            message = f"{self._name}: no kind {kind} in {api_version}"
            if api_version in self._unserved:
                message += f" ({api_version} is not served: is its CRD installed?)"
            raise NotFound(message, status=404)
        return known[kind]

    async def _discover(self, api_version: str) -> dict[str, ResourceInfo]:
        base = _api_base(api_version)
        self._unserved.discard(api_version)
        try:
            listing = await self._get(base)
        except NotFound as exc:
            if api_version == "v1":  # every Kubernetes API server serves it
                raise Unreachable(
                    f"{self._name}: GET {base}: the server did not answer as a Kubernetes"
                    " API server (HTTP 404)",
                    status=404,
                ) from exc
            # kube-apiserver answers a group/version it does not serve with a plain
            # text 404: a kind whose CRD is not installed, that object's failure only.
            self._unserved.add(api_version)
            listing = {"resources": []}
        found = _resources(f"{self._name}: GET {base}", api_version, listing)
        found = _shared(api_version, found)
        self._keep(api_version, found)
        return found

    def _keep(self, api_version: str, found: dict[str, ResourceInfo]) -> None:
        """Keep ``found``, dropping the least recently used group-versions past
        MAX_KEPT_RESOURCES kinds in all (a group-version counts one more than its
        kinds, so one serving none is not kept for free)."""
        self._known.pop(api_version, None)
        kept = sum(len(kinds) + 1 for kinds in self._known.values()) + len(found) + 1
        while kept > MAX_KEPT_RESOURCES and self._known:
            oldest = next(iter(self._known))
            kept -= len(self._known.pop(oldest)) + 1
            self._unserved.discard(oldest)
        self._known[api_version] = found

    def forget(self, api_version: str) -> None:
        self._known.pop(api_version, None)
        self._unserved.discard(api_version)

    async def preferred_version(self, group: str) -> str | None:
        """The server's preferred version of an API group, e.g. ``cluster.x-k8s.io/v1beta2``."""
        info = await self._group(group)
        preferred = (info or {}).get("preferredVersion", {}).get("groupVersion")
        return str(preferred) if preferred else None

    async def served_versions(self, group: str) -> list[str]:
        """The ``group/version``s the server serves of an API group, its preferred
        first; none when it serves the group no more. The core group ("") is ``v1``."""
        if not group:
            return ["v1"]
        info = await self._group(group)
        if info is None:
            return []
        found = [v for v in _group_versions(info.get("versions")) if v.startswith(f"{group}/")]
        preferred = _group_versions([info.get("preferredVersion")])
        return sorted(found, key=lambda version: version not in preferred)

    async def _group(self, group: str) -> Obj | None:
        """The server's APIGroup of ``group``, None when it does not serve it."""
        try:
            return await self._get(f"/apis/{_segment(group, 'API group')}")
        except NotFound:
            return None

    async def path(
        self, api_version: str, kind: str, namespace: str | None = None, name: str | None = None
    ) -> str:
        """The REST path of a kind, or of one object. Every segment is checked, so a
        name or namespace from a manifest (or a binding) can only ever name an object
        of this kind: never a path elsewhere, nor a request that cannot be sent."""
        info = await self.resource_info(api_version, kind)
        parts = [_api_base(api_version)]
        if info.namespaced and namespace:
            parts += ["namespaces", _segment(namespace, "namespace")]
        parts.append(info.plural)
        if name:
            parts.append(_segment(name, "name"))
        return "/".join(parts)


def _segment(value: str, what: str) -> str:
    """``value`` as one path segment, or InvalidObjectName (never quoting it)."""
    if not isinstance(value, str) or not _SEGMENT.fullmatch(value) or value in (".", ".."):
        raise InvalidObjectName(
            f"the {what} cannot be part of a Kubernetes API path (1-253 characters of"
            " letters, digits and -._~:@!$&'()*+,;=, not '.' or '..')"
        )
    return value


def _api_base(api_version: str) -> str:
    """``/api/v1`` or ``/apis/<group>/<version>``, each part a valid segment."""
    if api_version == "v1":
        return "/api/v1"
    group, slash, version = api_version.partition("/")
    if not slash:
        raise InvalidObjectName("the apiVersion is not <group>/<version> nor v1")
    return f"/apis/{_segment(group, 'API group')}/{_segment(version, 'API version')}"


def _group_versions(entries: Any) -> list[str]:
    """The groupVersions of an APIGroup's version entries; malformed ones skipped."""
    if not isinstance(entries, list):
        return []
    found = (entry.get("groupVersion") for entry in entries if isinstance(entry, dict))
    return [version for version in found if isinstance(version, str)]


def _resources(where: str, api_version: str, listing: Obj) -> dict[str, ResourceInfo]:
    """The kinds of a group-version's discovery answer; AnswerTooLarge past
    MAX_RESOURCES, Unreachable when it is not an API resource list."""
    resources = listing.get("resources")
    if not isinstance(resources, list):
        raise Unreachable(f"{where}: not an API resource list")
    found = {}
    for entry in resources:
        info = _resource_info(api_version, entry)
        if info is not None:
            found[info.kind] = info
            if len(found) > MAX_RESOURCES:
                message = f"{where}: more than {MAX_RESOURCES} resources in one group-version"
                raise AnswerTooLarge(message, limit="resources")
    return found


class _Kinds(dict[str, ResourceInfo]):
    """A group-version's kinds, as found (a dict that can be weakly referenced)."""


# Each group-version's kinds as found, held once by every client that found the same
# (never changed in place) for as long as one holds them: a fleet's clusters serve the
# same kinds, and each client kept a copy of its own (about 7 KB).
_FOUND: weakref.WeakValueDictionary[tuple[Any, ...], _Kinds] = weakref.WeakValueDictionary()


def _shared(api_version: str, found: dict[str, ResourceInfo]) -> dict[str, ResourceInfo]:
    key = (api_version, *found.values())
    held = _FOUND.get(key)
    if held is None:
        held = _FOUND[key] = _Kinds(found)
    return held


def _resource_info(api_version: str, entry: Any) -> ResourceInfo | None:
    """One discovery entry; subresources and malformed entries are skipped (a kind
    or plural longer than 253 characters too: no real kind is)."""
    if not isinstance(entry, dict):
        return None
    kind, plural, namespaced = entry.get("kind"), entry.get("name"), entry.get("namespaced")
    if not (isinstance(kind, str) and isinstance(plural, str) and _SEGMENT.fullmatch(plural)):
        return None
    if not 0 < len(kind) <= 253:
        return None
    if plural in (".", ".."):
        return None
    return ResourceInfo(api_version, kind, plural, bool(namespaced))
