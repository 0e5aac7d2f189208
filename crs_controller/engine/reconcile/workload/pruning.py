"""Deleting what left the desired set (``deletionPolicy: Delete``) from one workload
cluster, with the decisions of ``core.state.prune_decisions``. A failed deletion keeps the old
inventory in the binding, so the next attempt knows what is left to delete.

Every delete first reads the live object: only what our field manager applied is
deleted. The binding's inventory is tenant-writable; an entry naming an object we
never applied is refused (logged, reported by the caller) and dropped from the
inventory, so it is neither deleted nor tried again. A CustomResourceDefinition or
Namespace no allowDelete names is kept, named in the entry's deletionsSkipped and
forgotten from the inventory (``core.state.deletion_guard``).

An entry recorded under an apiVersion the server serves no more (a PodDisruptionBudget
applied as policy/v1beta1 before an upgrade) names the same object, served under
another version of its group: it is read, proven ours and deleted through that
version. Only a kind its group serves in no version is gone, nothing left to delete."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field

import structlog

from crs_controller.clients.api import KubeAPI, Obj
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
    stale_objects,
    without,
)
from crs_controller.engine.reconcile.context import Settings

log = structlog.get_logger(__name__)


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
    on); names not in it come after, by name. Only objects ``field_manager``
    applied are deleted; of the protected kinds, only those the CRS's ``allowed``
    (by CRS name; none: nothing allowed) lets go.
    """
    pruned = Pruned(dict(new_entries))
    new_entries = pruned.entries
    rank = {name: index for index, name in enumerate(order)}
    ordered = sorted(old_entries.items(), key=lambda item: (rank.get(item[0], len(rank)), item[0]))
    for name, old in ordered:
        if policies.get(name) != "Delete":
            continue
        stale = stale_objects(old, inventory(new_entries.values()), wanted)
        if not stale:
            continue
        if client is None:  # not contactable now: remember, delete later
            new_entries[name] = keep_pending(new_entries.get(name), old)
            continue
        guarded = guard(old, stale, (allowed or {}).get(name, {}))
        await _prune_one(client, name, old, guarded, field_manager, pruned)
    return pruned


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
    """The apiVersion that reaches the objects recorded under an (apiVersion, kind):
    the recorded one while the server serves the kind there, else another version of
    its group that serves the kind, the same object (a PodDisruptionBudget applied as
    policy/v1beta1 is served as policy/v1 from Kubernetes 1.25 on); None when its
    group serves the kind no more. Looked up once per (apiVersion, kind), and once
    more, discovery forgotten, when an object is not found through it: the server
    may have stopped serving a version since the client discovered it."""

    client: KubeAPI
    found: dict[tuple[str, str], str | None] = field(default_factory=dict)
    checked: set[tuple[str, str]] = field(default_factory=set)

    async def of(self, ref: ObjectRef) -> str | None:
        key = (ref.api_version, ref.kind)
        if key not in self.found:
            self.found[key] = await _serving_version(self.client, *key)
        return self.found[key]

    async def after_miss(self, ref: ObjectRef) -> str | None:
        """Another version to look for ``ref`` through, now that the one from ``of``
        found nothing; None when there is none (it is gone)."""
        key = (ref.api_version, ref.kind)
        if key in self.checked:
            return None
        self.checked.add(key)
        tried = self.found.pop(key, None)
        self.client.forget_discovery(ref.api_version)
        if tried is not None and tried != ref.api_version:
            self.client.forget_discovery(tried)
        found = await self.of(ref)
        return found if found != tried else None


async def _serving_version(client: KubeAPI, api_version: str, kind: str) -> str | None:
    """``api_version`` if the server serves ``kind`` there, else the first version of
    its group (the preferred one first) that does, else None."""
    try:
        await client.resource_info(api_version, kind)
        return api_version
    except NotFound:
        pass
    group = api_version.rpartition("/")[0]
    for version in await client.served_versions(group):
        if version == api_version:
            continue  # just found not to serve the kind
        try:
            await client.resource_info(version, kind)
        except NotFound:
            continue
        return version
    return None


async def _read(
    client: KubeAPI, ref: ObjectRef, versions: ServedVersions
) -> tuple[str, Obj] | None:
    """The live object of ``ref`` and the apiVersion it was read through; None when
    it is gone (or its kind is, e.g. the CRD went first)."""
    namespace = ref.namespace or None
    api_version = await versions.of(ref)
    while api_version is not None:
        live = await client.get(api_version, ref.kind, ref.name, namespace)
        if live is not None:
            return api_version, live
        api_version = await versions.after_miss(ref)
    return None


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
    if (read := await _read(client, ref, versions)) is None:
        return
    api_version, live = read
    uid = (live.get("metadata") or {}).get("uid")
    if uids is not None and uid not in uids:
        done.skipped.append(ref)
        return
    why = refusal(live, field_manager)
    if why is not None:
        log.warning("deletion refused", object=str(ref), reason=why, cluster=client.name)
        done.refused.append((ref, why))
        return
    # The very object proven ours: one recreated since the read is a Conflict.
    namespace = ref.namespace or None
    await client.delete(
        api_version, ref.kind, ref.name, namespace, uid=uid if isinstance(uid, str) else None
    )
    served_as = {} if api_version == ref.api_version else {"served_as": api_version}
    log.info("object deleted", object=str(ref), cluster=client.name, **served_as)
    done.deleted.append(ref)
