"""A shard set's contributions: what each member says of each CRS, one ConfigMap per
(member, CRS) in the Leases' namespace.

A member writes only its own (``publish``), and only when what it says changed: an idle
shard set makes no request, and a member restarted under the same identity with the
same values writes nothing (its earlier writes come back through the list). Every member
watches all of them (one label-selected Informer), keeps them parsed
(``published``) and is told which CRS a change is about (``on_change``). A member
deletes its own on a clean release (``drop_own``); the leader deletes those of members
gone for ``stale_after`` lease durations, as it does their Leases, and those of CRSs it
no longer knows (``sweep``).

The object: ``crs-share-<xxh3_64(member) hex[:12]>-<CRS uid>``, labelled
``addons.crs.dev/shard-contribution=<that hex>``, annotated with the member's identity
and the CRS's ``namespace/name``; the value is ``contribution.json``, compact JSON of
``dump(value)``. The store knows nothing of the value's type: ``parse`` (which raises
ValueError on bad input) and ``dump`` are given. An object whose name, label and
annotations disagree, over 256 KiB, not JSON or refused by ``parse`` is left out, with
one log line naming it (the Informer's, never its content).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

import structlog
import xxhash

from crs_controller.clients.api import KubeAPI, Obj
from crs_controller.core.errors import Conflict, CRSError, NotFound, failure_level
from crs_controller.engine.io.informer import Informer, WatchSpec, metadata
from crs_controller.engine.io.waiting import WaitingClock, sleep_for

log = structlog.get_logger(__name__)

CONTRIBUTION_LABEL = "addons.crs.dev/shard-contribution"
MEMBER_ANNOTATION = "addons.crs.dev/shard-member"
CRS_ANNOTATION = "addons.crs.dev/crs"
DATA_KEY = "contribution.json"
NAME_PREFIX = "crs-share-"
MAX_BYTES = 256 * 1024
_HEX_LEN = 12
# What the API server gives as metadata.uid: checked before it goes into a name.
_UID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")

T = TypeVar("T")
Changed = Callable[[str, str], None]  # the CRS's namespace, name


class Contributions(Protocol[T]):
    """What a CRS's pass asks of the shard set's contributions."""

    @property
    def identity(self) -> str:
        """This member's identity: its own entry in ``published``."""
        ...

    def published(self, crs_uid: str) -> dict[str, T]:
        """Every member's contribution to the CRS with ``crs_uid``, by identity."""
        ...

    async def publish(self, crs_namespace: str, crs_name: str, crs_uid: str, value: T) -> None:
        """Make ``value`` this member's contribution to the CRS (no request if it is)."""
        ...


class ContributionTooLarge(ValueError):
    """A contribution.json over MAX_BYTES (its name is what the refusal's log says)."""


@dataclass(frozen=True)
class Held(Generic[T]):
    """One member's contribution to one CRS, as the cache holds it."""

    name: str  # the ConfigMap's
    member: str
    crs_namespace: str
    crs_name: str
    crs_uid: str
    value: T
    digest: str  # of its contribution.json: what a publish compares with
    resource_version: str


def member_hex(identity: str) -> str:
    """The label value (and name part) of a member: 12 hex digits of its XXH3-64."""
    return xxhash.xxh3_64_hexdigest(identity.encode())[:_HEX_LEN]


def object_name(identity: str, crs_uid: str) -> str:
    """The ConfigMap of ``identity``'s contribution to the CRS with ``crs_uid``;
    ValueError when the uid is not one the API server gives."""
    if not _UID.fullmatch(crs_uid):
        raise ValueError("a CRS uid that is not a lowercase UUID")
    return f"{NAME_PREFIX}{member_hex(identity)}-{crs_uid}"


def encoded(data: Mapping[str, Any]) -> str:
    """Compact JSON, keys sorted: the same value is always the same text."""
    return json.dumps(data, separators=(",", ":"), sort_keys=True, ensure_ascii=False)


def digest(text: str) -> str:
    return xxhash.xxh3_64_hexdigest(text.encode())


def _text(obj: Obj) -> str:
    """The object's contribution.json, within MAX_BYTES."""
    data = obj.get("data")
    text = data.get(DATA_KEY) if isinstance(data, Mapping) else None
    if not isinstance(text, str):
        raise ValueError(f"no {DATA_KEY}")
    if len(text) > MAX_BYTES or len(text.encode()) > MAX_BYTES:
        raise ContributionTooLarge(f"{DATA_KEY} over {MAX_BYTES} bytes")
    return text


def _annotation(annotations: Mapping[str, Any], key: str) -> str:
    value = annotations.get(key)
    if not isinstance(value, str) or not value:
        raise ValueError(f"no annotation {key}")
    return value


def read_held(obj: Obj, parse: Callable[[Mapping[str, Any]], T]) -> Held[T]:
    """What the cache keeps of a contribution's ConfigMap; ValueError when its name,
    label and annotations disagree, or its value is too large, not JSON or refused."""
    meta = metadata(obj)
    annotations, labels = meta.get("annotations") or {}, meta.get("labels") or {}
    member = _annotation(annotations, MEMBER_ANNOTATION)
    crs_namespace, _, crs_name = _annotation(annotations, CRS_ANNOTATION).partition("/")
    if not crs_namespace or not crs_name:
        raise ValueError(f"annotation {CRS_ANNOTATION} is not namespace/name")
    name, prefix = str(meta.get("name", "")), f"{NAME_PREFIX}{member_hex(member)}-"
    if labels.get(CONTRIBUTION_LABEL) != member_hex(member) or not name.startswith(prefix):
        raise ValueError(f"name or label {CONTRIBUTION_LABEL} not of the member it names")
    crs_uid = name.removeprefix(prefix)
    object_name(member, crs_uid)  # the uid's shape
    text = _text(obj)
    loaded = json.loads(text)
    if not isinstance(loaded, Mapping):
        raise ValueError(f"{DATA_KEY} is not a JSON object")
    value = parse(loaded)
    version = str(meta.get("resourceVersion", ""))
    return Held(name, member, crs_namespace, crs_name, crs_uid, value, digest(text), version)


def contribution_body(
    namespace: str, identity: str, crs_namespace: str, crs_name: str, crs_uid: str, text: str
) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": object_name(identity, crs_uid),
            "namespace": namespace,
            "labels": {CONTRIBUTION_LABEL: member_hex(identity)},
            "annotations": {
                MEMBER_ANNOTATION: identity,
                CRS_ANNOTATION: f"{crs_namespace}/{crs_name}",
            },
        },
        "data": {DATA_KEY: text},
    }


def _changed(old: Held[T] | None, new: Held[T] | None) -> bool:
    """Does the event say something new (not a resync, nor the echo of a write)?"""
    if old is None or new is None:
        return old is not new
    return old.digest != new.digest


class ContributionStore(Generic[T]):
    """The contributions of a shard set, as this member (``identity``) sees and
    writes them in ``namespace`` (the Leases')."""

    def __init__(
        self,
        client: KubeAPI,
        namespace: str,
        identity: str,
        *,
        parse: Callable[[Mapping[str, Any]], T],
        dump: Callable[[T], dict[str, Any]],
        on_change: Changed,
        clock: WaitingClock,
        lease_seconds: float,
        stale_after: float,
    ) -> None:
        self._client = client
        self._namespace = namespace
        self._identity = identity
        self._dump = dump
        self._on_change = on_change
        self._clock = clock
        self._lease_seconds = lease_seconds
        self._stale_after = stale_after  # lease durations
        self._by_uid: dict[str, dict[str, Held[T]]] = {}
        self._out_since: dict[str, float] = {}  # members not live, since (sweeps)
        self._unknown_since: dict[str, float] = {}  # CRS uids not known, since
        spec = WatchSpec("v1", "ConfigMap", namespace, label_selector=CONTRIBUTION_LABEL)
        self.informer: Informer[Held[T]] = Informer(
            client, spec, lambda obj: read_held(obj, parse), self._seen, clock=clock
        )

    @property
    def identity(self) -> str:
        return self._identity

    def published(self, crs_uid: str) -> dict[str, T]:
        return {member: held.value for member, held in self._by_uid.get(crs_uid, {}).items()}

    def _held(self) -> list[Held[T]]:
        return [held for by_member in self._by_uid.values() for held in by_member.values()]

    # -- the cache ------------------------------------------------------------------

    def _seen(self, old: Held[T] | None, new: Held[T] | None) -> None:
        """The Informer's handler: keep the index, wake the CRS a change is about."""
        self._index(old, new)
        held = new or old
        if held is not None and _changed(old, new):
            self._on_change(held.crs_namespace, held.crs_name)

    def _index(self, old: Held[T] | None, new: Held[T] | None) -> None:
        if old is not None:
            by_member = self._by_uid.get(old.crs_uid, {})
            by_member.pop(old.member, None)
            if not by_member:
                self._by_uid.pop(old.crs_uid, None)
        if new is not None:
            self._by_uid.setdefault(new.crs_uid, {})[new.member] = new

    def _cached(self, written: Obj) -> None:
        """Cache what this member just wrote (the watch brings it again: no wake)."""
        name = str(metadata(written).get("name", ""))
        old = self.informer.get(self._namespace, name)
        self._index(old, self.informer.put(written))

    # -- writing ----------------------------------------------------------------------

    async def publish(self, crs_namespace: str, crs_name: str, crs_uid: str, value: T) -> None:
        """Make ``value`` this member's contribution to the CRS: no request when the
        cache (the watch, or this member's last write) holds it already; else create
        or update it. Conflict: read it and write once more; a second one goes up (the
        pass retries)."""
        name = object_name(self._identity, crs_uid)
        held = self.informer.get(self._namespace, name)
        if held is not None and held.value == value:
            return  # the usual pass: nothing changed, nothing dumped
        text = encoded(self._dump(value))
        if len(text.encode()) > MAX_BYTES:
            raise ContributionTooLarge(f"{DATA_KEY} over {MAX_BYTES} bytes")
        if held is not None and held.digest == digest(text):
            return
        body = contribution_body(
            self._namespace, self._identity, crs_namespace, crs_name, crs_uid, text
        )
        try:
            written = await self._write(body, held.resource_version if held else None)
        except (Conflict, NotFound):
            # Written meanwhile (by this member's earlier process: a version the cache
            # refused or has not seen yet), or deleted (by a sweep).
            current = await self._client.get("v1", "ConfigMap", name, self._namespace)
            version = metadata(current).get("resourceVersion") if current else None
            written = await self._write(body, str(version) if version else None)
        self._cached(written)

    async def _write(self, body: Obj, resource_version: str | None) -> Obj:
        if resource_version is None:
            return await self._client.create(body)
        meta = {**body["metadata"], "resourceVersion": resource_version}
        return await self._client.replace({**body, "metadata": meta})

    async def _delete(self, held: Held[T], *, resource_version: str | None = None) -> bool:
        """Delete one contribution (with ``resource_version``: only that version);
        a failure is logged (the next release or sweep tries again)."""
        try:
            await self._client.delete(
                "v1", "ConfigMap", held.name, self._namespace, resource_version=resource_version
            )
        except CRSError as exc:
            where = f"{self._namespace}/{held.name}"
            log.log(failure_level(exc), "contribution not removed", configmap=where, error=str(exc))
            return False
        self._index(self.informer.remove(self._namespace, held.name), None)
        return True

    async def drop_own(self) -> None:
        """Delete this member's contributions (a clean release): the others need not
        wait for the leader's sweep. The first failure ends it (the server is out of
        reach, or the rights are missing): the sweep takes the rest."""
        dropped = 0
        for held in [h for h in self._held() if h.member == self._identity]:
            if not await self._delete(held):
                break
            dropped += 1
        if dropped:
            log.info("removed this member's contributions", identity=self._identity, count=dropped)

    # -- the leader's sweep -----------------------------------------------------------

    async def sweep(self, live: frozenset[str], known: frozenset[str], now: float) -> None:
        """Delete the contributions of members counted out (not in ``live``) at every
        sweep for ``stale_after`` lease durations, and of CRS uids not in ``known`` for
        a lease duration (a CRS just made may be seen by a member before the leader).
        Not acting itself (not in ``live``), this member knows nothing of the others:
        nothing is timed or deleted. Times are monotonic seconds (``now``)."""
        if self._identity not in live:
            return
        for held in self._stale(live, known, now):
            # Only the version seen: a member back meanwhile keeps what it wrote.
            if await self._delete(held, resource_version=held.resource_version):
                # Named by the object (checked against the member and uid it was read
                # with), never by its annotations, which whoever wrote it chose.
                log.info("removed a stale contribution", configmap=held.name)

    def _stale(self, live: frozenset[str], known: frozenset[str], now: float) -> list[Held[T]]:
        """The contributions a sweep at ``now`` deletes (and the timing kept)."""
        held = self._held()
        out = _timed(self._out_since, {h.member for h in held} - live, now)
        unknown = _timed(self._unknown_since, {h.crs_uid for h in held} - known, now)
        grace = self._stale_after * self._lease_seconds
        gone = {member for member, since in out.items() if now - since >= grace}
        deleted = {uid for uid, since in unknown.items() if now - since >= self._lease_seconds}
        return [h for h in held if h.member in gone or h.crs_uid in deleted]

    async def keep_swept(
        self, live: Callable[[], frozenset[str]], known: Callable[[], frozenset[str]]
    ) -> None:
        """Sweep every lease duration until cancelled (the leader's)."""
        while True:
            await self.sweep(live(), known(), self._clock.now())
            await sleep_for(self._clock, self._lease_seconds)


def _timed(since: dict[str, float], now_out: set[str], now: float) -> dict[str, float]:
    """Keep in ``since`` when each of ``now_out`` was first found out (now, if it was
    not already); forget the rest. Returns ``since``."""
    for key in [k for k in since if k not in now_out]:
        del since[key]
    for key in now_out:
        since.setdefault(key, now)
    return since
