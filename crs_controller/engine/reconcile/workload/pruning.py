"""Deleting what left the desired set (``deletionPolicy: Delete``) from one workload
cluster, with the decisions of ``core.state.prune_decisions``. A failed deletion keeps the old
inventory in the binding, so the next attempt knows what is left to delete.

Every delete first reads the live object: only what our field manager applied is
deleted. The binding's inventory is tenant-writable; an entry naming an object we
never applied is refused (logged, reported by the caller) and dropped from the
inventory, so it is neither deleted nor tried again. A CustomResourceDefinition or
Namespace no allowDelete names is kept, named in the entry's deletionsSkipped and
forgotten from the inventory (``core.state.deletion_guard``). An entry whose
namespace contradicts the scope that cluster serves its kind in (by discovery) is
refused too, before any request for it: a namespace on a cluster-scoped kind would
reach the cluster-scoped object of that name, not the object the entry names.

An entry recorded under an apiVersion the server serves no more (a PodDisruptionBudget
applied as policy/v1beta1 before an upgrade) names the same object, served under
another version of its group: it is read, proven ours and deleted through that
version. Only a kind its group serves in no version is gone, nothing left to delete."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field

import structlog

from crs_controller.clients.api import KubeAPI, Obj, ResourceInfo
from crs_controller.core.api.models import CRSBinding, ObjectKey
from crs_controller.core.errors import CRSError, NotFound, Unreachable
from crs_controller.core.manifests.documents import ObjectRef
from crs_controller.core.state.deletion_guard import (
    Allowances,
    Guarded,
    Kept,
    guard,
    with_skipped,
)
from crs_controller.core.state.prune_decisions import (
    inventory,
    keep_pending,
    refusal,
    scope_refusal,
    stale_objects,
    without,
)
from crs_controller.engine.reconcile.context import Settings

log = structlog.get_logger(__name__)

# Other versions of a kind's group looked through when its own does not serve it: real
# groups serve a few (v1alpha1 to v1), a server claiming hundreds is not asked of each.
MAX_OTHER_VERSIONS = 8


@dataclass
class Pruned:
    """After pruning: the binding entries to record, and per CRS name what failed
    (tried again), what was refused as not provably ours and what was kept as
    protected (each reported once)."""

    entries: dict[str, CRSBinding]
    errors: dict[str, list[str]] = field(default_factory=dict)
    refused: dict[str, str] = field(default_factory=dict)
    deleted: dict[str, list[ObjectRef]] = field(default_factory=dict)
    kept: dict[str, list[Kept]] = field(default_factory=dict)
    # A CRS whose deletion waits for a dependent's objects to go first -> that CRS.
    waiting: dict[str, str] = field(default_factory=dict)


@dataclass
class Deletion:
    """One round of deletes: a message per object that failed, each object refused
    because the live one does not show that we applied it, with why, and each left
    alone as another object than the one asked for."""

    failed: list[str] = field(default_factory=list)
    refused: list[tuple[ObjectRef, str]] = field(default_factory=list)
    deleted: list[ObjectRef] = field(default_factory=list)
    skipped: list[ObjectRef] = field(default_factory=list)  # not among the uids asked for

    @property
    def refused_refs(self) -> list[ObjectRef]:
        return [ref for ref, _ in self.refused]

    def refusals(self, most: int = 5) -> str:
        """The refused objects and why, for an Event: at most ``most`` of them, the
        count of the rest (an inventory can list thousands)."""
        shown = [f"{ref} ({why})" for ref, why in self.refused[:most]]
        if (more := len(self.refused) - most) > 0:
            shown.append(f"and {more} more")
        return "refused to delete what it did not apply: " + "; ".join(shown)


async def prune(
    client: KubeAPI | None,
    old_entries: Mapping[str, CRSBinding],
    new_entries: Mapping[str, CRSBinding],
    policies: Mapping[str, str],
    wanted: set[ObjectKey],
    order: Sequence[str] = (),
    *,
    allowed: Mapping[str, Allowances] | None = None,
    after: Mapping[str, Sequence[str]] | None = None,
    field_manager: str = Settings.field_manager,
) -> Pruned:
    """Delete stale objects of every CRS whose policy is Delete (``client`` None: the
    cluster cannot be contacted now, so nothing is deleted and everything stays
    recorded for later).

    ``policies`` maps the CRS names that still exist to their deletionPolicy; an
    entry of a CRS that is gone entirely is dropped (nothing left to decide with).
    ``wanted`` holds what the matching CRSs' sources ask for now. A CRS whose
    deletion did not finish keeps its old inventory in the returned entries.
    ``order``: the CRS names in removal order (dependents before what they depend
    on); names not in it come after, by name; ``after``: the CRSs whose objects go
    first (``_waits``). Only objects ``field_manager`` applied are deleted; of the
    protected kinds, only those ``allowed`` (by CRS name; none: none) let go."""
    new_entries = (pruned := Pruned(dict(new_entries))).entries
    rank = {name: index for index, name in enumerate(order)}
    ordered = sorted(old_entries.items(), key=lambda item: (rank.get(item[0], len(rank)), item[0]))
    for name, old in ordered:
        if policies.get(name) != "Delete":
            continue
        stale = stale_objects(old, inventory(new_entries.values()), wanted)
        if not stale:
            continue
        if client is None or _waits(pruned, name, (after or {}).get(name, ())):
            # Not contactable now, or not yet: delete later.
            new_entries[name] = keep_pending(new_entries.get(name), old)
            continue
        guarded = guard(old, stale, (allowed or {}).get(name, {}))
        await _prune_one(client, name, old, guarded, field_manager, pruned)
    return pruned


def _waits(pruned: Pruned, name: str, first: Sequence[str]) -> bool:
    """Does CRS ``name`` wait for one of ``first`` whose entry still lists objects on
    the cluster? The first such is noted in ``pruned.waiting``."""
    for other in first:
        entry = pruned.entries.get(other)
        if entry is not None and inventory([entry]):
            pruned.waiting[name] = other
            return True
    return False


def _keep(pruned: Pruned, name: str, kept: Sequence[Kept]) -> None:
    """Kept objects are in no new entry already (forgotten); a matching CRS's entry
    names them."""
    pruned.kept[name] = list(kept)
    if (entry := pruned.entries.get(name)) is not None:
        pruned.entries[name] = with_skipped(entry, (k.ref for k in kept))


async def _prune_one(
    client: KubeAPI,
    name: str,
    old: CRSBinding,
    stale: Guarded,
    field_manager: str,
    pruned: Pruned,
) -> None:
    """Delete one CRS's stale objects; what failed stays pending in its entry, what
    was refused or kept is reported once and forgotten."""
    if stale.kept:
        _keep(pruned, name, stale.kept)
    if not stale.delete:
        return
    try:
        done = await delete_objects(client, stale.delete, field_manager)
    except Unreachable as exc:
        done = Deletion(failed=[str(exc)])
    if done.deleted:
        pruned.deleted[name] = done.deleted
    if done.refused:
        pruned.refused[name] = done.refusals()
    if done.failed:
        # Stale objects are in no new entry: a refused or kept one is only in ``old``.
        pending = without(old, [*done.refused_refs, *(k.ref for k in stale.kept)])
        pruned.entries[name] = keep_pending(pruned.entries.get(name), pending)
        pruned.errors[name] = done.failed


async def delete_objects(
    client: KubeAPI,
    refs: Sequence[ObjectRef],
    field_manager: str,
    *,
    uids: Collection[str] | None = None,
) -> Deletion:
    """Delete in the given order what ``field_manager`` provably applied; refuse the
    rest. With ``uids``, only the objects whose uid is among them are deleted (the
    very objects created, not another object of the same name); any other is left as
    it is (``skipped``). Raises Unreachable as soon as the cluster stops answering."""
    done = Deletion()
    versions = ServedVersions(client)
    for ref in refs:
        try:
            await _delete_one(client, ref, versions, field_manager, uids, done)
        except NotFound:
            continue  # gone meanwhile, or its kind
        except Unreachable:
            raise
        except CRSError as exc:
            done.failed.append(f"delete {ref}: {exc}")
    return done


@dataclass
class ServedVersions:
    """How the server serves the objects recorded under an (apiVersion, kind): under
    the recorded apiVersion while the server serves the kind there, else under another
    version of its group that serves the kind, the same object (a PodDisruptionBudget
    applied as policy/v1beta1 is served as policy/v1 from Kubernetes 1.25 on); None
    when its group serves the kind no more. Looked up once per (apiVersion, kind), and
    once more, discovery forgotten, when an object is not found through it or its
    scope contradicts the entry: the server may have changed since the client
    discovered it."""

    client: KubeAPI
    found: dict[tuple[str, str], ResourceInfo | None] = field(default_factory=dict)
    checked: set[tuple[str, str]] = field(default_factory=set)

    async def of(self, ref: ObjectRef) -> ResourceInfo | None:
        key = (ref.api_version, ref.kind)
        if key not in self.found:
            self.found[key] = await _serving(self.client, *key)
        return self.found[key]

    async def rediscovered(self, ref: ObjectRef) -> ResourceInfo | None:
        """``of`` with discovery forgotten, the first time it is asked for this
        (apiVersion, kind); what that found, after."""
        key = (ref.api_version, ref.kind)
        if key not in self.checked:
            self.checked.add(key)
            tried = self.found.pop(key, None)
            self.client.forget_discovery(ref.api_version)
            if tried is not None and tried.api_version != ref.api_version:
                self.client.forget_discovery(tried.api_version)
        return await self.of(ref)

    async def after_miss(self, ref: ObjectRef) -> ResourceInfo | None:
        """Another version to look for ``ref`` through, now that the one from ``of``
        found nothing; None when there is none (it is gone)."""
        key = (ref.api_version, ref.kind)
        if key in self.checked:
            return None
        tried = self.found.get(key)
        found = await self.rediscovered(ref)
        if found is None or (tried is not None and found.api_version == tried.api_version):
            return None
        return found


async def _serving(client: KubeAPI, api_version: str, kind: str) -> ResourceInfo | None:
    """The kind as served under ``api_version`` if the server serves it there, else
    under the first version of its group (the preferred one first, at most
    MAX_OTHER_VERSIONS of them) that does, else None."""
    try:
        return await client.resource_info(api_version, kind)
    except NotFound:
        pass
    group = api_version.rpartition("/")[0]
    served = await client.served_versions(group)
    others = [version for version in served if version != api_version]  # just refused it
    for version in others[:MAX_OTHER_VERSIONS]:
        try:
            return await client.resource_info(version, kind)
        except NotFound:
            continue
    return None


class _WrongScope(Exception):
    """The ref's namespace contradicts the scope the server serves its kind in."""


async def _in_scope(
    versions: ServedVersions, ref: ObjectRef, info: ResourceInfo
) -> ResourceInfo | None:
    """``info`` when ``ref``'s namespace fits the kind's scope; else the kind
    discovered anew (a cached scope may be stale), None when it is gone. Raises
    _WrongScope when that does not fit either: a request through ``ref`` would name
    another object than the entry does (the API server ignores a namespace on a
    cluster-scoped kind)."""
    if scope_refusal(ref, info.namespaced) is None:
        return info
    fresh = await versions.rediscovered(ref)
    if fresh is not None and (why := scope_refusal(ref, fresh.namespaced)) is not None:
        raise _WrongScope(why)
    return fresh


async def _read(
    client: KubeAPI, ref: ObjectRef, versions: ServedVersions
) -> tuple[str, Obj] | None:
    """The live object of ``ref`` and the apiVersion it was read through; None when
    it is gone (or its kind is, e.g. the CRD went first). Raises _WrongScope, before
    any request for the object, when its namespace contradicts the kind's scope."""
    namespace = ref.namespace or None
    info = await versions.of(ref)
    while info is not None:
        if (info := await _in_scope(versions, ref, info)) is None:
            return None
        live = await client.get(info.api_version, ref.kind, ref.name, namespace)
        if live is not None:
            return info.api_version, live
        info = await versions.after_miss(ref)
    return None


def _refuse(client: KubeAPI, ref: ObjectRef, why: str, done: Deletion) -> None:
    log.warning("deletion refused", object=str(ref), reason=why, cluster=client.name)
    done.refused.append((ref, why))


async def _delete_one(
    client: KubeAPI,
    ref: ObjectRef,
    versions: ServedVersions,
    field_manager: str,
    uids: Collection[str] | None,
    done: Deletion,
) -> None:
    """Delete ``ref`` if the live object is one asked for and shows that
    ``field_manager`` applied it; record the refusal if not ours."""
    try:
        read = await _read(client, ref, versions)
    except _WrongScope as exc:
        _refuse(client, ref, str(exc), done)
        return
    if read is None:
        return
    api_version, live = read
    uid = (live.get("metadata") or {}).get("uid")
    if uids is not None and uid not in uids:
        done.skipped.append(ref)
        return
    why = refusal(live, field_manager)
    if why is not None:
        _refuse(client, ref, why, done)
        return
    # The very object proven ours: one recreated since the read is a Conflict.
    namespace = ref.namespace or None
    await client.delete(
        api_version, ref.kind, ref.name, namespace, uid=uid if isinstance(uid, str) else None
    )
    served_as = {} if api_version == ref.api_version else {"served_as": api_version}
    log.info("object deleted", object=str(ref), cluster=client.name, **served_as)
    done.deleted.append(ref)
