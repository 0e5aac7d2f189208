"""Server-side apply of a resource's objects to one workload cluster.

The only code that writes to workload clusters. One request per object, in the safe
order the objects arrive in; CRDs applied in this pass are awaited until Established
before anything else goes out. A failing object is recorded and the rest carry on.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import Any

from crs_controller.clients.api import KubeAPI, ResourceInfo
from crs_controller.core.api.models import ObjectKey
from crs_controller.core.errors import APIError, CRSError, NotFound, Unreachable
from crs_controller.core.manifests.documents import ObjectRef, apply_body, object_ref
from crs_controller.core.manifests.ordering import is_crd
from crs_controller.core.spec.ignore import NO_IGNORES, Ignores, Pointer, leave_out
from crs_controller.core.state.drift_decisions import ours_hash, owned_fields

CRD_API_VERSION = "apiextensions.k8s.io/v1"
CRD_ESTABLISH_TIMEOUT = 30.0


@dataclass
class ApplyResult:
    # Each applied object with its records from the apply response: content hash,
    # generation, and the hash of the fields our manager owns. By input position.
    applied: dict[int, ObjectRef] = field(default_factory=dict)
    skipped: list[ObjectRef] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    # The object whose apply request went out and has no answer yet: it may or may
    # not be on the cluster now (the call was cancelled, or the cluster stopped
    # answering).
    sending: ObjectRef | None = None

    @property
    def ok(self) -> bool:
        return not self.errors


async def apply_objects(
    client: KubeAPI,
    objects: Sequence[dict[str, Any]],
    *,
    field_manager: str,
    only_missing: bool,
    confidential: bool = False,
    hashes: Sequence[str] | None = None,
    ignores: Ignores = NO_IGNORES,
    inventory: Sequence[ObjectRef] = (),
    claimed: Sequence[ObjectRef] = (),
    theirs: Sequence[ObjectRef] = (),
    present: Collection[ObjectRef] = (),
    into: ApplyResult | None = None,
) -> ApplyResult:
    """Apply ``objects`` (already in apply order); ``hashes``, when given, are their
    content hashes, recorded on what was applied. With ``only_missing`` (ApplyOnce),
    objects that already exist are left untouched: reported as skipped, or as applied
    when our field manager applied them and no other CRS records them (``theirs``; a
    lost inventory is re-adopted, see ``_ApplyOne.adopts``), unless another resource
    of the CRS records them (``claimed``, e.g. another version's build): those are
    sent. ``confidential`` (objects from a Secret) keeps the server's messages about
    them to reason and field path. An object in ``inventory`` or ``claimed`` that
    exists (``present``, or read: ``_left_out``) goes without the paths ``ignores``
    leaves to others. Raises Unreachable as soon as the cluster stops answering;
    ``into``, when given, is filled as objects go out (the caller knows what went)."""
    keys = [frozenset(o.key for o in refs) for refs in (inventory, claimed, theirs, present)]
    one = _ApplyOne(client, field_manager, only_missing, confidential, hashes, ignores, *keys)
    result = into if into is not None else ApplyResult()
    pending_crds: list[str] = []
    for position, obj in enumerate(objects):
        if pending_crds and not is_crd(obj):
            await _await_established(client, pending_crds, result)
            pending_crds = []
        applied = await one.into(result, position, obj)
        if applied is not None and is_crd(obj):
            pending_crds.append(applied.name)
    if pending_crds:
        await _await_established(client, pending_crds, result)
    return result


@dataclass(frozen=True)
class _ApplyOne:
    """How each object of one apply_objects call is applied and recorded."""

    client: KubeAPI
    field_manager: str
    only_missing: bool
    confidential: bool
    hashes: Sequence[str] | None
    ignores: Ignores
    known: frozenset[ObjectKey]  # the resource's inventory
    claimed: frozenset[ObjectKey]  # what other resources of the CRS record
    theirs: frozenset[ObjectKey]  # what other CRSs record on the cluster
    present: frozenset[ObjectKey]  # what this pass saw on the cluster

    def adopts(self, key: ObjectKey, existing: dict[str, Any]) -> bool:
        """Does ApplyOnce take an existing object as its own: applied by our field
        manager (a lost inventory, e.g. a binding restored from a backup without it, is
        re-adopted), and recorded by no other CRS unless this resource records it too:
        another CRS's object is not this one's to delete later."""
        if key in self.theirs and key not in self.known:
            return False
        return owned_fields(existing, self.field_manager) is not None

    async def into(
        self, result: ApplyResult, position: int, obj: dict[str, Any]
    ) -> ObjectRef | None:
        """Apply the object at ``position`` and record in ``result`` how it went: the
        object as applied, or None when it was skipped or failed."""
        try:
            ref, live = await _apply_one(self, obj, result)
        except Unreachable:
            raise  # the cluster is gone for now: the rest would only time out too
        except CRSError as exc:
            result.sending = None  # refused: not applied
            result.errors.append(_describe(object_ref(obj), exc, self.confidential))
            return None
        if live is None:
            result.skipped.append(ref)
            return None
        content_hash = self.hashes[position] if self.hashes is not None else None
        ignored = self.ignores.paths_for(ref)
        recorded = _record(ref, live, content_hash, self.field_manager, ignored)
        result.applied[position] = recorded
        result.sending = None
        return recorded


def _record(
    ref: ObjectRef,
    live: dict[str, Any],
    content_hash: str | None,
    manager: str,
    ignored: Sequence[Pointer],
) -> ObjectRef:
    """What the inventory keeps of an applied object: its content hash, its generation
    and the hash of the fields our manager owns (less those left to others), from the
    apply's answer."""
    meta = live.get("metadata") if isinstance(live, dict) else None
    generation = meta.get("generation") if isinstance(meta, dict) else None
    if generation is not None and (isinstance(generation, bool) or not isinstance(generation, int)):
        raise Unreachable(f"apply of {ref}: the answer's metadata.generation is not an integer")
    return ref.model_copy(
        update={
            "hash": content_hash,
            "generation": generation,
            "fields": ours_hash(owned_fields(live, manager), ignored),
        }
    )


async def _apply_one(
    one: _ApplyOne, obj: dict[str, Any], result: ApplyResult
) -> tuple[ObjectRef, dict[str, Any] | None]:
    """Apply ``obj`` where discovery says its kind lives. On a 404, discovery is asked
    once more: the server may serve the apiVersion no more, or the kind under another
    plural or scope, since the client discovered it. Only an answer that differs is
    tried again; the same one means the 404 was about the object (its namespace)."""
    client = one.client
    info = await client.resource_info(obj["apiVersion"], obj["kind"])
    try:
        return await _apply_as(one, info, obj, result)
    except NotFound:
        client.forget_discovery(info.api_version)
        fresh = await client.resource_info(info.api_version, info.kind)  # NotFound: not served
        if fresh == info:
            raise
    return await _apply_as(one, fresh, obj, result)


async def _apply_as(
    one: _ApplyOne, info: ResourceInfo, obj: dict[str, Any], result: ApplyResult
) -> tuple[ObjectRef, dict[str, Any] | None]:
    """Apply ``obj`` as ``info`` serves it (``result.sending`` names it while its
    request is out); ApplyOnce reads it first and leaves one that exists alone (the
    live one when it adopts it, else None)."""
    client, field_manager = one.client, one.field_manager
    body = apply_body(obj)
    meta = body["metadata"]
    if info.namespaced:
        # Objects without a namespace go to "default", as kubectl would put them.
        meta["namespace"] = meta.get("namespace") or "default"
    else:
        meta.pop("namespace", None)
    ref = object_ref(body)
    if one.only_missing and ref.key not in one.claimed:
        existing = await client.get(ref.api_version, ref.kind, ref.name, ref.namespace or None)
        if existing is not None:
            return ref, existing if one.adopts(ref.key, existing) else None
        result.sending = ref
        return ref, await client.apply(body, field_manager=field_manager)  # created whole
    left_out = await _left_out(one, ref)
    if left_out:
        # Stamped again: a path under metadata.labels must not take our label with it.
        body = apply_body(leave_out(body, left_out))
    result.sending = ref
    live = await client.apply(body, field_manager=field_manager)
    return ref, live


async def _left_out(one: _ApplyOne, ref: ObjectRef) -> tuple[Pointer, ...]:
    """The paths an apply of ``ref`` leaves to others: its ignored paths once it was
    created (in the inventory, or another resource's record) and still exists. One
    this pass did not see is read first: deleted since, it is created again whole,
    so no field left to others is lost and no required one is missing."""
    paths = one.ignores.left_out(ref, one.known | one.claimed)
    if not paths or ref.key in one.present:
        return paths
    existing = await one.client.get(ref.api_version, ref.kind, ref.name, ref.namespace or None)
    return paths if existing is not None else ()


async def _await_established(client: KubeAPI, names: list[str], result: ApplyResult) -> None:
    """Wait for the CRDs just applied; one that cannot be read fails alone (the rest
    of the objects still go out, and the CRD stays in the inventory)."""
    deadline = time.monotonic() + CRD_ESTABLISH_TIMEOUT
    waiting = set(names)
    while waiting and time.monotonic() < deadline:
        for name in sorted(waiting):
            if await _settled(client, name, result):
                waiting.discard(name)
        if waiting:
            await asyncio.sleep(0.2)
    for name in sorted(waiting):
        result.errors.append(f"CustomResourceDefinition {name}: not Established after 30s")


async def _settled(client: KubeAPI, name: str, result: ApplyResult) -> bool:
    """Is the CRD ``name`` done waiting for: Established (discovery of what it serves
    is refreshed), or unreadable (an error in ``result``)?"""
    try:
        crd = await client.get(CRD_API_VERSION, "CustomResourceDefinition", name)
    except Unreachable:
        raise
    except APIError as exc:  # e.g. 403: the apply went out, its outcome is unknown
        result.errors.append(f"CustomResourceDefinition {name}: not known to be Established: {exc}")
        return True
    where = f"{client.name}: GET CustomResourceDefinition {name}"
    if crd is None or not _established(crd, where):
        return False
    for api_version in _served(crd, where):
        client.forget_discovery(api_version)
    return True


def _established(crd: object, where: str) -> bool:
    status = _field(crd, "status", dict, where, "an object")
    conditions = _field(status, "conditions", list, where, "a list", path="status")
    return any(
        _is(c, where).get("type") == "Established" and c.get("status") == "True" for c in conditions
    )


def _served(crd: object, where: str) -> list[str]:
    """The apiVersions a CRD serves (the server's discovery of them changed)."""
    spec = _field(crd, "spec", dict, where, "an object")
    group = _field(spec, "group", str, where, "a string", path="spec")
    versions = _field(spec, "versions", list, where, "a list", path="spec")
    names = [_field(_is(v, where), "name", str, where, "a string") for v in versions]
    return [f"{group}/{name}" for name in names if name]


def _field(value: Any, key: str, kind: type, where: str, said: str, *, path: str = "") -> Any:
    """``value[key]`` when it is a ``kind`` (absent: an empty one); anything else is
    an answer we do not read, named by its field, never its value."""
    found = value.get(key) if isinstance(value, dict) else None
    if found is None:
        return kind()
    if not isinstance(found, kind):
        raise Unreachable(f"{where}: {'.'.join(p for p in (path, key) if p)} is not {said}")
    return found


def _is(value: Any, where: str) -> dict[str, Any]:
    """An item of a CRD's list field, which must be an object."""
    if not isinstance(value, dict):
        raise Unreachable(f"{where}: an item of a list is not an object")
    return value


def _describe(ref: ObjectRef, exc: CRSError, confidential: bool) -> str:
    """A user-facing error for one object. The server's message can quote the
    object's content, so for a Secret, or anything that came from a resource-set
    Secret, only the (field path, reason) causes are shown."""
    if not isinstance(exc, APIError):
        return f"{ref}: {exc}"
    if confidential or ref.kind == "Secret":
        detail = "; ".join(f"{field or '(object)'}: {why}" for field, why in exc.causes)
    else:
        detail = exc.body
    return f"{ref}: {exc}" + (f": {detail}" if detail else "")
