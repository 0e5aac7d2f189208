"""Observing what a CRS put on a workload cluster: drift checks (``core.state.drift_decisions``: did
someone change it?) and health checks (``core.health.readiness``: is it Ready?, for
``healthCheck.wait``). Reads only, and cheaply. Drift: one LIST per kind (per
namespace when all of that kind's objects share one) for a whole pass, whatever the
number of objects and resources, metadata only. Health: one GET per applied object,
so a look reads the objects the CRS applied and nothing else of their namespaces
(no other Secret's data, no other tenant's ConfigMaps), and needs no right to list.
Health is looked at only while there is something to wait for: a pass that applied
nothing to a cluster already Ready reads nothing.

A LIST is read page by page (``KubeAPI.pages``), each page dropped once read: the
other objects of a kind (every CRD on the cluster, with other tools' managedFields)
cost one page at a time, never the whole list at once; the client bounds the pages
and items of one LIST, so a server listing without end is still refused. What a pass
keeps of its LISTs is bounded by its inventory, not by what the server lists: only
the entries for the objects the CRS recorded on the cluster (and those asked
about), their owned fields at most MAX_KEPT_VALUES JSON values in all; past that the
pass ends as AnswerTooLarge naming the LIST.

Answers are read defensively: a field of the wrong type in what the server sent ends
the read as Unreachable naming the field, never its value."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from crs_controller.clients.api import KubeAPI, Obj
from crs_controller.core.api.models import HealthCheck, ObjectRef, ResourceBinding
from crs_controller.core.errors import AnswerTooLarge, APIError, NotFound, Unreachable
from crs_controller.core.health.cel_rules import CompiledRule, rule_for
from crs_controller.core.health.readiness import Health, describe, first_not_ready
from crs_controller.core.manifests.limits import json_size
from crs_controller.core.spec.ignore import NO_IGNORES, Ignores
from crs_controller.core.state.drift_decisions import Live, owned_fields, resource_drift
from crs_controller.core.state.status import Outcome
from crs_controller.engine.reconcile.result import NOTHING, RETRY, Result

ListKey = tuple[str, str, str | None]  # apiVersion, kind, namespace (None: all)
Place = tuple[str, str]  # namespace ("" when cluster-scoped), name
HEALTH_POLL_SECONDS = 2.0
# JSON values of owned fields (fieldsV1: a key and an object per field applied, no
# values) one pass keeps from its LISTs, about 8 MiB decoded: a resource value's fields
# are a fraction of its nodes (Calico's whole manifest is 16,470).
MAX_KEPT_VALUES = 100_000


class Observer:
    """What one pass has read from one workload cluster: drift LISTs are kept for the
    pass (the entries of ``inventory``'s objects and of those asked about), health
    GETs are not."""

    def __init__(
        self,
        client: KubeAPI,
        field_manager: str,
        ignores: Ignores = NO_IGNORES,
        inventory: Iterable[ObjectRef] = (),
    ) -> None:
        self._client = client
        self._manager = field_manager
        self._ignores = ignores  # the CRS's fields left to others, which drift passes over
        # Per LIST, each wanted object it covers: its live state, None when missing.
        self._lists: dict[ListKey, dict[Place, Live | None]] = {}
        self._wanted: dict[tuple[str, str], set[Place]] = defaultdict(set)
        self._kept = 0  # JSON values of the owned fields kept
        self._want(inventory)

    def _want(self, refs: Iterable[ObjectRef]) -> None:
        for ref in refs:
            self._wanted[(ref.api_version, ref.kind)].add((ref.namespace, ref.name))

    async def objects(self, refs: Sequence[ObjectRef]) -> list[Obj | Refused | None]:
        """Each object as it is now, whole (None: missing; Refused: the server would
        not say), one GET each, in order. Read afresh on each call: a health check
        polls. Raises Unreachable when the cluster does not answer."""
        return [await self._get(ref) for ref in refs]

    async def _get(self, ref: ObjectRef) -> Obj | Refused | None:
        try:
            return await self._client.get(
                ref.api_version, ref.kind, ref.name, ref.namespace or None
            )
        except Unreachable:
            raise
        except NotFound:  # the kind itself is not served (its CRD was deleted)
            return None
        except APIError as exc:  # e.g. 403: this object's read alone is refused
            return Refused(str(exc))

    async def drifted(self, recorded: ResourceBinding, mode: str) -> bool:
        """``mode`` is the CRS's driftDetection: Generation or Content."""
        live = await self.observe(recorded.objects)
        return resource_drift(
            mode,
            recorded.objects,
            live,
            recorded_sum=recorded.generation,
            recorded_fields=recorded.fields_hash,
            ignores=self._ignores,
        )

    async def observe(self, objects: Sequence[ObjectRef]) -> list[Live | None]:
        """Each object's live state (None: missing), from one LIST per kind."""
        self._want(objects)
        places: dict[tuple[str, str], set[Place]] = defaultdict(set)
        for ref in objects:
            places[(ref.api_version, ref.kind)].add((ref.namespace, ref.name))
        found: dict[tuple[str, str], dict[Place, Live | None]] = {}
        for (api_version, kind), namespace in _kinds(objects).items():
            asked = places[(api_version, kind)]
            found[(api_version, kind)] = await self._listed(api_version, kind, namespace, asked)
        return [found[(r.api_version, r.kind)].get((r.namespace, r.name)) for r in objects]

    def seen_missing(self, objects: Sequence[ObjectRef]) -> set[ObjectRef]:
        """Those of ``objects`` a drift check of this pass found missing (an object
        whose kind was not listed is not known to be missing)."""
        return {ref for ref in objects if self._seen(ref) is False}

    def seen_present(self, objects: Sequence[ObjectRef]) -> set[ObjectRef]:
        """Those of ``objects`` a drift check of this pass found on the cluster (an
        object whose kind was not listed is not known to exist)."""
        return {ref for ref in objects if self._seen(ref) is True}

    def _seen(self, ref: ObjectRef) -> bool | None:
        """Did this pass's LIST of the object's kind find it (None: not listed, or
        listed before it was wanted)?"""
        place = (ref.namespace, ref.name)
        for key in (
            (ref.api_version, ref.kind, ref.namespace or None),
            (ref.api_version, ref.kind, None),
        ):
            listed = self._lists.get(key)
            if listed is not None and place in listed:
                return listed[place] is not None
        return None

    async def _listed(
        self, api_version: str, kind: str, namespace: str | None, asked: set[Place]
    ) -> dict[Place, Live | None]:
        """The wanted objects of a kind (in ``namespace``, None: all), from this pass's
        LIST of it when that covered ``asked``, else from a new one."""
        for key in ((api_version, kind, namespace), (api_version, kind, None)):
            kept = self._lists.get(key)
            if kept is not None and asked <= kept.keys():
                return kept
        wanted = self._wanted[(api_version, kind)]
        listed: dict[Place, Live | None] = {
            place: None for place in wanted if namespace is None or place[0] == namespace
        }
        try:
            await self._read_pages(api_version, kind, namespace, listed)
        except NotFound:  # the kind itself is gone, e.g. its CRD was deleted
            listed = dict.fromkeys(listed)
        self._lists[(api_version, kind, namespace)] = listed
        return listed

    async def _read_pages(
        self, api_version: str, kind: str, namespace: str | None, listed: dict[Place, Live | None]
    ) -> None:
        """Fill ``listed`` (the wanted places) from a LIST read page by page: each page
        is dropped once its wanted entries are kept, so the kind's other objects (other
        tools' CRDs and their managedFields) are bounded per page, not in total; the
        client bounds the pages and items of one LIST."""
        where = f"{self._client.name}: LIST {kind}"
        pages = self._client.pages(api_version, kind, namespace, metadata_only=True)
        async for items, _ in pages:
            for item in items:
                meta = _metadata(item, where)
                place, generation = _place(meta, where), _generation(meta, where)
                if place in listed:
                    listed[place] = Live(generation, self._owned(item, where))

    def _owned(self, item: Obj, where: str) -> Any:
        """The fields our manager owns on a listed object, counted against
        MAX_KEPT_VALUES."""
        owned = owned_fields(item, self._manager)
        room = MAX_KEPT_VALUES - self._kept
        nodes, _ = json_size(owned, max_nodes=room, max_depth=room)
        self._kept += nodes
        if self._kept > MAX_KEPT_VALUES:
            raise AnswerTooLarge(
                f"{where}: the fields owned by the objects a drift check keeps in one pass"
                f" are more than {MAX_KEPT_VALUES} JSON values",
                limit="values",
            )
        return owned


@dataclass(frozen=True)
class Refused:
    """An object the server would not show (e.g. 403): its readiness is unknown."""

    why: str  # the request and the status, never the server's message


def _metadata(item: object, where: str) -> dict[str, Any]:
    """An item's metadata, checked for what a drift check reads of it."""
    meta = item.get("metadata") if isinstance(item, dict) else None
    if not isinstance(meta, dict):
        raise Unreachable(f"{where}: an item's metadata is not an object")
    managed = meta.get("managedFields")
    if managed is not None and not (
        isinstance(managed, list) and all(isinstance(m, dict) for m in managed)
    ):
        raise Unreachable(f"{where}: an item's metadata.managedFields is not a list of objects")
    return meta


def _place(meta: dict[str, Any], where: str) -> tuple[str, str]:
    """(namespace, name) of a listed item."""
    found = []
    for field in ("namespace", "name"):
        value = meta.get(field) or ""
        if not isinstance(value, str):
            raise Unreachable(f"{where}: an item's metadata.{field} is not a string")
        found.append(value)
    return found[0], found[1]


def _generation(meta: dict[str, Any], where: str) -> int:
    generation = meta.get("generation")
    if generation is None:
        return 0
    if isinstance(generation, bool) or not isinstance(generation, int):
        raise Unreachable(f"{where}: an item's metadata.generation is not an integer")
    return generation


def _kinds(refs: Sequence[ObjectRef]) -> dict[tuple[str, str], str | None]:
    """Each kind among ``refs`` and where to LIST it: the one namespace all its
    objects share, else None (all namespaces; also for cluster-scoped kinds)."""
    by_kind: dict[tuple[str, str], set[str]] = defaultdict(set)
    for ref in refs:
        by_kind[(ref.api_version, ref.kind)].add(ref.namespace)
    return {
        kind: (next(iter(spaces)) or None) if len(spaces) == 1 else None
        for kind, spaces in by_kind.items()
    }


@dataclass(frozen=True)
class Checked:
    """A health check's outcome, and what should happen next (look again, retry)."""

    outcome: Outcome
    then: Result = NOTHING


async def check_health(
    observer: Observer,
    check: HealthCheck,
    resources: Sequence[ResourceBinding],
    *,
    applied: Outcome,
    limit: float,
    previous: Outcome | None,
    sent_now: bool,
    now: datetime,
    rules: Sequence[CompiledRule] = (),
) -> Checked:
    """``applied`` is the pass's outcome (every resource applied); ``previous`` the
    pair's last outcome; ``sent_now`` whether this pass sent anything; ``rules`` the
    CRS's health rules, which win over kstatus for their kinds."""
    if not sent_now and _was_ready(previous, applied):
        return Checked(applied)  # Ready since, and nothing changed
    refs = [o for resource in resources for o in resource.objects]
    live = await observer.objects(refs)
    found = first_not_ready(
        [(_label(r), _judged(obj)) for r, obj in zip(refs, live, strict=True)],
        [rule_for(rules, r.api_version, r.kind) for r in refs],
    )
    if found is None:
        return Checked(applied)
    label, health = found
    why = describe(label, health)
    if health.state == "Failed":
        return Checked(_unhealthy(applied, why), RETRY)
    waited = _waited(resources, now)
    if waited is not None and waited >= limit:
        return Checked(_unhealthy(applied, f"{why} (not Ready after {check.timeout})"), RETRY)
    return Checked(_waiting(applied, previous, label, why), Result.after(HEALTH_POLL_SECONDS))


def _judged(obj: Obj | Refused | None) -> Obj | Health | None:
    """A refused read is not Ready: waiting may make it readable (RBAC being applied);
    past the timeout the cluster is Unhealthy, naming it."""
    return Health("InProgress", f"not readable: {obj.why}") if isinstance(obj, Refused) else obj


def _waiting(applied: Outcome, previous: Outcome | None, blocker: str, why: str) -> Outcome:
    """Waiting for ``blocker``, the first object not Ready at this look. Its message
    is the one from when that object began to block: its counts move with every look,
    and the binding is not rewritten for them; another object blocking is told at once.
    When the wait began is the binding's business (``core.state.bindings``), and the
    timeout counts from the apply (``_waited``), whatever blocks."""
    message = f"waiting for {why}"
    if previous is not None and _was_waiting(previous, applied) and previous.blocker == blocker:
        message = previous.message
    return replace(applied, message=message, ready=False, blocker=blocker)


def _was_ready(previous: Outcome | None, applied: Outcome) -> bool:
    """Ready at the same generation and revision as this pass's outcome."""
    if previous is None or previous.state != "Applied" or not previous.ready:
        return False
    return _same_target(previous, applied)


def _was_waiting(previous: Outcome | None, applied: Outcome) -> bool:
    """Waiting for Ready at the same generation and revision as this pass's outcome."""
    if previous is None or previous.state != "Applied" or previous.ready:
        return False
    return _same_target(previous, applied)


def _same_target(previous: Outcome, applied: Outcome) -> bool:
    return (previous.generation, previous.revision) == (applied.generation, applied.revision)


def _unhealthy(applied: Outcome, why: str) -> Outcome:
    return Outcome("Failed", "Unhealthy", why, applied.generation, revision=applied.revision)


def _waited(resources: Sequence[ResourceBinding], now: datetime) -> float | None:
    """Seconds since the latest apply of these resources."""
    times = [r.last_applied_time for r in resources if r.last_applied_time is not None]
    return (now - max(times)).total_seconds() if times else None


def _label(ref: ObjectRef) -> str:
    where = f"{ref.namespace}/{ref.name}" if ref.namespace else ref.name
    return f"{ref.kind} {where}"
