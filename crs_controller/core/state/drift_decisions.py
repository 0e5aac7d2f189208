"""Drift: has someone changed what we applied?

Right after an apply the binding records the sum of the objects'
``metadata.generation``; the API server bumps a generation on every spec change,
so a different sum later means someone edited an object (the "compounded
Generation" of the original proposal). One number per resource keeps the binding
small.

Content drift also catches edits that bump no generation (ConfigMap data, labels,
most Service fields). It reads ownership rather than values: when anyone else
changes a field our field manager applied, the API server moves that field out of
our managedFields entry, so a hash of the fields we own, taken right after the apply
and again later, differs exactly when someone else changed one of them — and server
defaulting or normalization, which changes no ownership, never looks like drift.

Fields left to others (``spec.ignore``, core/spec/ignore) are taken out of the owned fields
both when they are recorded and when they are checked, so another manager taking one
is not drift. Objects an ignore rule targets are never judged by their generation:
the API server bumps it for an HPA's scale as for an edit, and the two cannot be told
apart; their owned fields are compared instead, in Generation mode too.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import xxhash

from crs_controller.core.api.models import ObjectRef
from crs_controller.core.spec.ignore import NO_IGNORES, Ignores, Pointer, strip_fields

__all__ = [
    "Live",
    "content_drift",
    "fields_hash",
    "generation_drift",
    "generation_sum",
    "ours_hash",
    "owned_fields",
    "owned_hash",
    "resource_drift",
]


def generation_sum(generations: Sequence[int | None]) -> int:
    """The sum to record; None (an object without a generation) counts as 0."""
    return sum(generation or 0 for generation in generations)


def generation_drift(recorded_sum: int | None, live_generations: Sequence[int | None]) -> bool:
    """True if the live objects differ from what was recorded.

    In ``live_generations`` None means the object is missing (pass 0 for an existing
    object that has no generation). Without a recorded sum there is nothing to
    compare with, so no verdict: False.
    """
    if recorded_sum is None:
        return False
    if any(generation is None for generation in live_generations):
        return True
    return generation_sum(live_generations) != recorded_sum


def owned_fields(obj: Mapping[str, Any] | None, manager: str) -> Any:
    """The fieldsV1 that ``manager`` owns through Apply on ``obj`` (None if none)."""
    meta = obj.get("metadata") if isinstance(obj, Mapping) else None
    managed = meta.get("managedFields") if isinstance(meta, Mapping) else None
    for entry in managed if isinstance(managed, list) else []:
        if not isinstance(entry, Mapping):
            continue  # not an entry: nothing of ours in it
        if entry.get("manager") == manager and entry.get("operation") == "Apply":
            return entry.get("fieldsV1")
    return None


def fields_hash(owned: Sequence[Any]) -> str:
    """One hash over the owned fields of a resource's objects, in inventory order."""
    canonical = json.dumps(list(owned), sort_keys=True, separators=(",", ":"))
    return "xxh3:" + xxhash.xxh3_64_hexdigest(canonical.encode())


def owned_hash(owned: Any) -> str | None:
    """The hash of the fields our manager owns on one object (None when it owns none)."""
    return None if owned is None else fields_hash([owned])


def ours_hash(owned: Any, ignored: Sequence[Pointer]) -> str | None:
    """The hash of the fields our manager owns on one object, without those it leaves
    to others: what is recorded after an apply and compared at a check."""
    return owned_hash(strip_fields(owned, ignored))


@dataclass(frozen=True)
class Live:
    """One inventoried object as a drift check reads it (metadata only)."""

    generation: int | None
    owned: Any  # the fieldsV1 our manager owns; None when it owns none


def resource_drift(
    mode: str,
    objects: Sequence[ObjectRef],
    live: Sequence[Live | None],
    *,
    recorded_sum: int | None = None,
    recorded_fields: str | None = None,
    ignores: Ignores = NO_IGNORES,
) -> bool:
    """Has someone changed what a resource applied? ``live`` matches ``objects``
    (None: missing). Each object is compared with its own records (``generation``,
    and ``fields`` in Content ``mode`` or when ``ignores`` targets it); an inventory
    written before objects carried records falls back to the resource's
    ``recorded_sum`` and ``recorded_fields``."""
    if any(state is None for state in live):
        return True
    states = [state for state in live if state is not None]
    ignored = [ignores.paths_for(o) for o in objects]
    if all(o.generation is None for o in objects):
        if generation_drift(recorded_sum, [s.generation or 0 for s in states]):
            return True
    elif any(
        o.generation is not None and not paths and o.generation != s.generation
        for o, s, paths in zip(objects, states, ignored, strict=True)
    ):
        return True
    if all(o.fields is None for o in objects):
        owned = [strip_fields(s.owned, paths) for s, paths in zip(states, ignored, strict=True)]
        return mode == "Content" and content_drift(recorded_fields, owned)
    return any(
        o.fields is not None and o.fields != ours_hash(s.owned, paths)
        for o, s, paths in zip(objects, states, ignored, strict=True)
        if mode == "Content" or paths
    )


def content_drift(recorded: str | None, live_owned: Sequence[Any]) -> bool:
    """True when the fields we own now differ from those recorded after the apply;
    a missing object (None) is drift. Without a record: no verdict."""
    if recorded is None:
        return False
    if any(owned is None for owned in live_owned):
        return True
    return fields_hash(live_owned) != recorded
