"""What the caches keep of the metadata tenants write, and the bound on what must be
kept whole.

Kubernetes bounds each label (a key of at most 317 characters, a value of at most
63) and all of an object's annotations together (256 KiB), but not the number of
labels: only etcd's limit on an object (about 1.5 MiB) does, some 15,000 labels. Every
replica caches every Cluster and every ClusterResourceSet, so a few dozen such objects
from one tenant would take every replica past its memory limit. So what is kept of a
tenant's metadata is what the controller reads (``kept_meta``), and labels, which the
selectors read and so must be kept whole, are bounded (``labels_problem``): a Cluster
whose labels are over the bound is kept without them and refused (it selects no
ClusterResourceSet), a binding is refused. The bound is far above any real object's:
Cluster API and its providers put a few labels on a Cluster, topology and fleet
tooling some tens. A binding's annotations, which a write sends back whole, are kept
whole up to the API server's own bound on their size (``annotations_problem``): one
``kubectl apply`` wrote carries its whole last applied self in one of them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

# At most this many labels, and this many characters of their keys and values together:
# at the bound a Cluster's labels hold about 72 KB in memory (the characters and some
# 150 bytes a label for the strings and their dict entry). 1.4 MiB of labels held
# 3.1 MiB in every replica before.
MAX_LABELS = 256
MAX_LABEL_CHARACTERS = 32 * 1024
# The API server's own bound on an object's annotations: the bytes of their keys and
# values together (a binding's are kept whole up to it, at most MAX_LABELS of them).
MAX_ANNOTATION_BYTES = 256 * 1024


def labels_problem(labels: Any, where: str) -> str | None:
    """Why the labels at ``where`` (``metadata.labels``) are over the bound, naming the
    field and the bound, never a key or value; None within it."""
    return _entries_problem(labels, where, MAX_LABEL_CHARACTERS, "characters", len)


def annotations_problem(annotations: Any, where: str) -> str | None:
    """Why the annotations at ``where`` are over the bound: MAX_LABELS entries, or the
    API server's MAX_ANNOTATION_BYTES (UTF-8, as it counts them); as ``labels_problem``."""
    return _entries_problem(annotations, where, MAX_ANNOTATION_BYTES, "bytes", _utf8_bytes)


def _utf8_bytes(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


def _entries_problem(
    found: Any, where: str, most: int, unit: str, size: Callable[[str], int]
) -> str | None:
    if not isinstance(found, Mapping):
        return None  # the model says what is wrong with it
    if len(found) > MAX_LABELS:
        return f"{where}: more than {MAX_LABELS} entries"
    total = 0
    for key, value in found.items():
        total += size(key) if isinstance(key, str) else 1
        total += size(value) if isinstance(value, str) else 1
        if total > most:
            return f"{where}: more than {most} {unit} of keys and values"
    return None


def kept_meta(
    meta: Mapping[str, Any], fields: tuple[str, ...], annotations: tuple[str, ...]
) -> dict[str, Any]:
    """Of an object's raw ``metadata``, the ``fields`` and, of its annotations, those
    named in ``annotations`` (the ones the controller reads)."""
    kept = {key: meta[key] for key in fields if key in meta}
    found = meta.get("annotations")
    if isinstance(found, Mapping):
        kept["annotations"] = {key: found[key] for key in annotations if key in found}
    return kept
