"""The content hash of a ConfigMap/Secret, ``xxh3:<hex>``.

The hash is what the binding records and what Reconcile mode compares, so it is
computed from the decoded content only: the same manifests give the same hash
whatever the dict order, the metadata (resourceVersion, labels, …) or whether a
Secret was written with base64 ``data`` or plain ``stringData``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import xxhash

from crs_controller.core.manifests.documents import resource_entries

__all__ = ["content_hash", "object_hash", "resource_hash"]

_PREFIX = "xxh3:"


def content_hash(entries: Sequence[tuple[str, bytes]]) -> str:
    """Hash ``(key, value)`` pairs, in key order, with XXH3-64."""
    hasher = xxhash.xxh3_64()
    for key, value in sorted(entries):
        # Length-prefixed so that ("ab", "c") and ("a", "bc") cannot collide.
        for part in (key.encode(), value):
            hasher.update(len(part).to_bytes(8, "big"))
            hasher.update(part)
    return _PREFIX + str(hasher.hexdigest())


def resource_hash(source: Mapping[str, Any]) -> str:
    """The hash of a raw ConfigMap/Secret; raises like resource_entries."""
    return content_hash(resource_entries(source))


def object_hash(obj: Mapping[str, Any]) -> str:
    """The hash of one parsed object: whether its content changed since it was last
    applied. Key order does not matter."""
    canonical = json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return _PREFIX + xxhash.xxh3_64_hexdigest(canonical.encode())
