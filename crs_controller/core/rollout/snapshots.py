"""A revision's snapshot: the content of a CRS's sources as it was hashed, kept so the
revision can be rolled out again. Pure: what the objects look like, and the check a
snapshot passes before anything of it is used.

One revision is one ConfigMap (always: it lists the resources in spec order, and
holds the ConfigMaps' content) and, when the CRS names Secrets, one Secret of type
Opaque holding their content: Secret content is kept only in Secrets. Both are
immutable, owned by the CRS (so they go with it), labelled with its uid, and
annotated with the revision and the bytes they hold (``SIZE_ANNOTATION``, what the
total bound of a CRS's kept snapshots counts). Each holds one key,
``sources.json``, of at most ``MAX_SNAPSHOT_BYTES``: a snapshot larger than that is
not written. A CRS's kept snapshots hold at most ``MAX_HISTORY_BYTES`` together
(``core.rollout.history.within_bytes`` drops the oldest revisions beyond).

Before use a snapshot is checked: the object's label, owner and revision
annotation name this CRS and this revision, it is immutable, it names the resources
the CRS names now, and the revision computed again from its content (each source's
hash as ``core.manifests.hashing`` computes it, then the revision as
``core.rollout.plan.revision``) is the one asked for. Any difference refuses it,
naming what differs; nothing of it is applied.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Mapping, Sequence
from typing import Any

from crs_controller.core.errors import CRSError, ResourceError
from crs_controller.core.manifests.hashing import resource_hash
from crs_controller.core.rollout.plan import revision
from crs_controller.core.text import safe

__all__ = [
    "MAX_HISTORY_BYTES",
    "MAX_SNAPSHOT_BYTES",
    "REVISION_ANNOTATION",
    "SIZE_ANNOTATION",
    "SNAPSHOT_KEY",
    "SNAPSHOT_LABEL",
    "SnapshotRefused",
    "SnapshotTooLarge",
    "build",
    "no_snapshot",
    "read",
    "size_of",
    "snapshot_name",
]

SNAPSHOT_LABEL = "addons.crs.dev/snapshot-of"  # the CRS's uid
REVISION_ANNOTATION = "addons.crs.dev/revision"
SIZE_ANNOTATION = "addons.crs.dev/snapshot-bytes"  # the bytes of its sources.json
SNAPSHOT_KEY = "sources.json"
# Below the API server's 1 MiB for a ConfigMap's or Secret's data, with room left for
# the metadata (and a Secret's base64 stays under etcd's 1.5 MiB request limit).
MAX_SNAPSHOT_BYTES = 900 * 1024
# All kept snapshots of one CRS together (ConfigMaps and Secrets, as stored): beyond
# it the oldest revisions go, whatever revisionHistoryLimit says. Far above what ten
# revisions of common sources hold; three or more of sources near the bound above.
MAX_HISTORY_BYTES = 8 * 1024 * 1024
_NAME_PREFIX_LIMIT = 200

Raw = Mapping[str, Any]
Key = tuple[str, str]  # kind, name


class SnapshotRefused(CRSError):
    """A snapshot that cannot be used: missing, forged or edited."""

    reason = "SnapshotRefused"


class SnapshotTooLarge(CRSError):
    """The sources of a revision are larger than a snapshot holds."""

    reason = "SnapshotTooLarge"


def no_snapshot(rev: str) -> str:
    """Why a rollback to ``rev`` is refused when it has no snapshot: none was found,
    or ``rev`` is not in the history (whose revisions alone keep theirs). ``rev`` may
    be a tenant's annotation text: its control characters are escaped, its length cut."""
    return f"revision {safe(rev, 80)} has no snapshot"


def snapshot_name(crs_name: str, rev: str) -> str:
    """The name of a revision's snapshot objects (a ConfigMap, and a Secret)."""
    return f"{crs_name[:_NAME_PREFIX_LIMIT]}.revision.{rev.removeprefix('xxh3:')}"


def size_of(annotations: Mapping[str, str]) -> int | None:
    """The bytes a snapshot object holds, as its annotation says (None: not said)."""
    value = annotations.get(SIZE_ANNOTATION)
    if value is None or not (value.isascii() and value.isdigit()) or len(value) > 12:
        return None
    return int(value)


def build(
    namespace: str,
    crs: tuple[str, str],
    rev: str,
    resources: Sequence[Key],
    sources: Mapping[Key, Raw],
) -> list[dict[str, Any]]:
    """The snapshot objects of revision ``rev`` of CRS ``crs`` (name, uid) whose
    ``resources`` (spec order) have these raw ``sources``; raises SnapshotTooLarge."""
    listed = [list(key) for key in resources]
    configmaps = [_content(key, sources[key]) for key in resources if key[0] == "ConfigMap"]
    secrets = [_content(key, sources[key]) for key in resources if key[0] == "Secret"]
    configmap = _encode({"revision": rev, "resources": listed, "sources": configmaps})
    objects = [_object("ConfigMap", namespace, crs, rev, {SNAPSHOT_KEY: configmap})]
    if secrets:
        secret = _encode({"revision": rev, "resources": listed, "sources": secrets})
        data = {SNAPSHOT_KEY: base64.b64encode(secret.encode()).decode()}
        objects.append(_object("Secret", namespace, crs, rev, data) | {"type": "Opaque"})
    return objects


def read(
    configmap: Raw | None,
    secret: Raw | None,
    uid: str,
    rev: str,
    resources: Sequence[Key],
) -> dict[Key, dict[str, Any]]:
    """The raw sources of revision ``rev`` of the CRS with ``uid``, naming
    ``resources`` (spec order), from its snapshot objects; raises SnapshotRefused."""
    if configmap is None:
        raise SnapshotRefused(no_snapshot(rev))
    found = _decode(configmap, uid, rev, resources)
    if any(kind == "Secret" for kind, _ in resources):
        if secret is None:
            raise SnapshotRefused(f"the snapshot Secret of revision {rev} is missing")
        found |= _decode(secret, uid, rev, resources)
    missing = [f"{kind}/{name}" for kind, name in resources if (kind, name) not in found]
    if missing:
        raise SnapshotRefused(f"the snapshot of revision {rev} lacks {', '.join(missing)}")
    try:
        hashes = [(kind, name, resource_hash(found[(kind, name)])) for kind, name in resources]
    except ResourceError as exc:
        raise SnapshotRefused(f"the snapshot of revision {rev}: {exc}") from None
    if revision(hashes) != rev:
        raise SnapshotRefused(f"the snapshot of revision {rev} does not hash to it: edited")
    return found


def _content(key: Key, raw: Raw) -> dict[str, Any]:
    """What the hash reads of a source: its data (and a Secret's type)."""
    kept: dict[str, Any] = {"kind": key[0], "name": key[1]}
    for field in ("data", "binaryData", "stringData", "type"):
        if raw.get(field) is not None:
            kept[field] = raw[field]
    return kept


def _encode(document: Mapping[str, Any]) -> str:
    text = json.dumps(document, sort_keys=True, separators=(",", ":"))
    if len(text.encode()) > MAX_SNAPSHOT_BYTES:
        limit = MAX_SNAPSHOT_BYTES // 1024
        raise SnapshotTooLarge(f"the sources are larger than a snapshot holds ({limit} KiB)")
    return text


def _object(
    kind: str, namespace: str, crs: tuple[str, str], rev: str, data: Mapping[str, str]
) -> dict[str, Any]:
    name, uid = crs
    owner = {
        "apiVersion": "addons.crs.dev/v1alpha1",
        "kind": "ClusterResourceSet",
        "name": name,
        "uid": uid,
    }
    size = sum(len(value.encode()) for value in data.values())
    metadata = {
        "name": snapshot_name(name, rev),
        "namespace": namespace,
        "labels": {SNAPSHOT_LABEL: uid},
        "annotations": {REVISION_ANNOTATION: rev, SIZE_ANNOTATION: str(size)},
        "ownerReferences": [owner],
    }
    return {
        "apiVersion": "v1",
        "kind": kind,
        "metadata": metadata,
        "immutable": True,
        "data": dict(data),
    }


def _decode(obj: Raw, uid: str, rev: str, resources: Sequence[Key]) -> dict[Key, dict[str, Any]]:
    """The sources one snapshot object holds, once its identity is checked."""
    kind = obj.get("kind", "object")
    where = f"the snapshot {kind} of revision {rev}"
    metadata = obj.get("metadata") or {}
    owners = [o.get("uid") for o in metadata.get("ownerReferences") or [] if isinstance(o, dict)]
    if (metadata.get("labels") or {}).get(SNAPSHOT_LABEL) != uid or uid not in owners:
        raise SnapshotRefused(f"{where} is not this ClusterResourceSet's")
    if (metadata.get("annotations") or {}).get(REVISION_ANNOTATION) != rev:
        raise SnapshotRefused(f"{where} names another revision")
    if obj.get("immutable") is not True:
        raise SnapshotRefused(f"{where} is not immutable")
    document = _document(obj, where)
    listed = document.get("resources")
    if document.get("revision") != rev or listed != [list(key) for key in resources]:
        raise SnapshotRefused(f"{where} names other resources than spec.resources")
    found: dict[Key, dict[str, Any]] = {}
    for source in document.get("sources") or []:
        if not isinstance(source, dict) or source.get("kind") != kind:
            raise SnapshotRefused(f"{where} holds content of another kind")
        raw = {k: v for k, v in source.items() if k != "name"}
        raw["metadata"] = {"name": source.get("name"), "namespace": metadata.get("namespace")}
        found[(kind, str(source.get("name")))] = raw
    return found


def _document(obj: Raw, where: str) -> dict[str, Any]:
    text = (obj.get("data") or {}).get(SNAPSHOT_KEY)
    if not isinstance(text, str):
        raise SnapshotRefused(f"{where} has no {SNAPSHOT_KEY}")
    try:
        if obj.get("kind") == "Secret":
            text = base64.b64decode(text, validate=True).decode()
        document = json.loads(text)
    except (binascii.Error, UnicodeDecodeError, ValueError):
        raise SnapshotRefused(f"{where} is not readable") from None
    if not isinstance(document, dict):
        raise SnapshotRefused(f"{where} is not readable")
    return document
