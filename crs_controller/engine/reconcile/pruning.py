"""Deleting what left the desired set (``deletionPolicy: Delete``) from one workload
cluster, with the decisions of ``core.pruning``. A failed deletion keeps the old
inventory in the binding, so the next attempt knows what is left to delete."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import structlog

from crs_controller.clients.kube import KubeClient
from crs_controller.core.errors import CRSError, NotFound, Unreachable
from crs_controller.core.manifests import ObjectRef
from crs_controller.core.models import CRSBinding
from crs_controller.core.pruning import ObjectKey, inventory, keep_pending, stale_objects

log = structlog.get_logger(__name__)


@dataclass
class Pruned:
    """After pruning: the binding entries to record, and what failed per CRS name."""

    entries: dict[str, CRSBinding]
    errors: dict[str, list[str]] = field(default_factory=dict)


async def prune(
    client: KubeClient | None,
    old_entries: Mapping[str, CRSBinding],
    new_entries: Mapping[str, CRSBinding],
    policies: Mapping[str, str],
    wanted: set[ObjectKey],
    order: Sequence[str] = (),
) -> Pruned:
    """Delete stale objects of every CRS whose policy is Delete (``client`` None: the
    cluster cannot be contacted now, so nothing is deleted and everything stays
    recorded for later).

    ``policies`` maps the CRS names that still exist to their deletionPolicy; an
    entry of a CRS that is gone entirely is dropped (nothing left to decide with).
    ``wanted`` holds what the matching CRSs' sources ask for now. A CRS whose
    deletion did not finish keeps its old inventory in the returned entries.
    ``order``: the CRS names in removal order (dependents before what they depend
    on); names not in it come after, by name.
    """
    new_entries = dict(new_entries)
    errors: dict[str, list[str]] = {}
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
        try:
            failed = await delete_objects(client, stale)
        except Unreachable as exc:
            failed = [str(exc)]
        if failed:
            new_entries[name] = keep_pending(new_entries.get(name), old)
            errors[name] = failed
    return Pruned(new_entries, errors)


async def delete_objects(client: KubeClient, refs: Sequence[ObjectRef]) -> list[str]:
    """Delete in the given order; returns one message per object that failed."""
    failed: list[str] = []
    for ref in refs:
        try:
            await client.delete(ref.api_version, ref.kind, ref.name, ref.namespace or None)
            log.info("object deleted", object=str(ref), cluster=client.name)
        except NotFound:
            continue  # its kind is gone (e.g. the CRD went first): nothing left
        except Unreachable:
            raise
        except CRSError as exc:
            failed.append(f"delete {ref}: {exc}")
    return failed
