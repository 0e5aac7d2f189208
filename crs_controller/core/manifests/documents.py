"""From a raw ConfigMap/Secret to the Kubernetes objects it carries.

Two rules shape this module:

* Secret data never reaches an error message. Every message names the resource, the
  key and the document, never the content; YAML errors are rebuilt from the
  parser's problem and position, because PyYAML's own text quotes the input.
* Values are read the way ``kubectl`` reads them (YAML 1.1 through go-yaml v2, see
  ``scalars``): ``y`` is a boolean, ``1e3`` a number, and a
  timestamp-looking or ``10:30``-looking scalar stays a string instead of becoming
  a date or a base-60 integer that the API server would reject or, worse, accept.
"""

from __future__ import annotations

import base64
import binascii
import copy
import json
import math
import re
from collections.abc import Iterator, Mapping
from typing import Any

import yaml
from yaml.constructor import ConstructorError

from crs_controller.core.api.models import ObjectRef
from crs_controller.core.errors import InvalidManifest, WrongSecretType
from crs_controller.core.manifests.limits import (
    MAX_COMPOSED_NODES,
    TOO_DEEP,
    TOO_MANY_COMPOSED,
    ValueBudget,
)
from crs_controller.core.manifests.placeholder import PLACEHOLDER_TAG, REFERENCE, Placeholder
from crs_controller.core.manifests.scalars import (
    BOOL,
    FLOAT,
    INT,
    MERGE,
    NULL,
    json_key,
    resolve_plain,
)

__all__ = [
    "APPLIED_BY",
    "APPLIED_BY_LABEL",
    "RESOURCE_SECRET_TYPE",
    "ObjectRef",
    "apply_body",
    "object_ref",
    "parse_objects",
    "resource_entries",
]

RESOURCE_SECRET_TYPE = "addons.cluster.x-k8s.io/resource-set"

# Fields the API server owns; sending them in a server-side apply either fails
# (resourceVersion, uid) or fights the server (status, managedFields).
_SERVER_METADATA = frozenset(
    {
        "resourceVersion",
        "uid",
        "managedFields",
        "creationTimestamp",
        "generation",
        "selfLink",
        "deletionTimestamp",
    }
)


def object_ref(obj: Mapping[str, Any]) -> ObjectRef:
    """The reference of a parsed object (as validated by parse_objects)."""
    metadata = obj.get("metadata") or {}
    return ObjectRef(
        api_version=obj["apiVersion"],
        kind=obj["kind"],
        namespace=metadata.get("namespace") or "",
        name=metadata["name"],
    )


# Stamped on every object the controller applies. Server-side apply drops a manager
# that owns no field from managedFields, and an object whose manifest is only its
# name (a Namespace, often) would then carry no sign that we applied it: deletion,
# which needs that sign (core/state/prune_decisions), could never remove it. Owning this label
# keeps our Apply entry there. One value for every CRS, so two CRSs applying the same
# object never take it from each other.
APPLIED_BY_LABEL = "addons.crs.dev/applied-by"
APPLIED_BY = "crs-controller"


def apply_body(obj: Mapping[str, Any]) -> dict[str, Any]:
    """A deep copy of ``obj`` holding only what a manifest may set, stamped with
    ``APPLIED_BY_LABEL``."""
    body = {key: copy.deepcopy(value) for key, value in obj.items() if key != "status"}
    metadata = body.get("metadata")
    if isinstance(metadata, dict):
        metadata = {k: v for k, v in metadata.items() if k not in _SERVER_METADATA}
        labels = metadata.get("labels")
        if labels is None or isinstance(labels, dict):  # anything else: the server refuses
            metadata["labels"] = {**(labels or {}), APPLIED_BY_LABEL: APPLIED_BY}
        body["metadata"] = metadata
    return body


# --- the content of a ConfigMap / Secret -------------------------------------------


def resource_entries(source: Mapping[str, Any]) -> list[tuple[str, bytes]]:
    """The decoded ``(key, value)`` pairs of a raw ConfigMap or Secret, sorted by key."""
    where = _describe(source)
    kind = source.get("kind")
    if kind == "ConfigMap":
        entries = {k: v.encode() for k, v in _string_map(where, source, "data").items()}
        for key, value in _string_map(where, source, "binaryData").items():
            if key in entries:  # the API server refuses this; only hand-written files get here
                raise InvalidManifest(f"{where}: key {key!r} is in both data and binaryData")
            entries[key] = _b64decode(where, "binaryData", key, value)
    elif kind == "Secret":
        secret_type = source.get("type") or "Opaque"
        if secret_type != RESOURCE_SECRET_TYPE:
            raise WrongSecretType(
                f"{where} has type {secret_type!r}; a ClusterResourceSet only uses "
                f"Secrets of type {RESOURCE_SECRET_TYPE!r}"
            )
        entries = {
            key: _b64decode(where, "data", key, value)
            for key, value in _string_map(where, source, "data").items()
        }
        # stringData wins over data for the same key, as on the API server.
        entries.update((k, v.encode()) for k, v in _string_map(where, source, "stringData").items())
    else:
        raise InvalidManifest(f"{where}: a resource must be a ConfigMap or a Secret")
    return sorted(entries.items())


def _describe(source: Mapping[str, Any]) -> str:
    """``ConfigMap default/calico-addon``: how messages name a resource."""
    kind = source.get("kind")
    metadata = source.get("metadata")
    metadata = metadata if isinstance(metadata, Mapping) else {}
    name = metadata.get("name") or "<unnamed>"
    namespace = metadata.get("namespace")
    kind = kind if isinstance(kind, str) and kind else "object"
    return f"{kind} {namespace}/{name}" if namespace else f"{kind} {name}"


def _string_map(where: str, source: Mapping[str, Any], field: str) -> dict[str, str]:
    value = source.get(field)
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise InvalidManifest(f"{where}: {field} must be a map of keys to strings")
    for key, item in value.items():
        if not isinstance(key, str) or not isinstance(item, str):
            raise InvalidManifest(f"{where}: {field} key {str(key)!r} must hold a string")
    return dict(value)


def _b64decode(where: str, field: str, key: str, value: str) -> bytes:
    # Go's decoder skips line breaks, so wrapped base64 in a hand-written file is fine.
    decoded: bytes | None
    try:
        decoded = base64.b64decode(value.replace("\n", "").replace("\r", ""), validate=True)
    except (binascii.Error, ValueError):
        decoded = None
    if decoded is None:  # raised outside the except so no cause is chained at all
        raise InvalidManifest(f"{where}: {field} key {key!r} is not valid base64")
    return decoded


# --- parsing ------------------------------------------------------------------------


def parse_objects(source: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Every object of a ConfigMap/Secret: keys in sorted order, then document order."""
    where = _describe(source)
    objects: list[dict[str, Any]] = []
    for key, raw in resource_entries(source):
        found = _parse_value(f"{where}: key {key!r}", raw)
        if not found:
            raise InvalidManifest(f"{where}: key {key!r} holds no Kubernetes object")
        objects.extend(found)
    return objects


def _parse_value(context: str, raw: bytes) -> list[dict[str, Any]]:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        offset = exc.start
    else:
        return [
            obj
            for index, document in enumerate(_documents(context, text), start=1)
            for obj in _objects(f"{context}, document {index}", document)
        ]
    raise InvalidManifest(f"{context}: not UTF-8 text (invalid byte at offset {offset})")


def load_documents(context: str, text: str) -> list[Any]:
    """Every document of ``text`` (YAML or JSON), within the limits a resource value
    has; InvalidManifest naming ``context`` and the document otherwise. For manifest
    files given on the command line, which get the same limits as the cluster's."""
    return _documents(context, text)


def _documents(context: str, text: str) -> list[Any]:
    budget = ValueBudget()
    stripped = text.lstrip()
    if stripped[:1] in ("{", "["):
        # JSON is far cheaper to parse than YAML; on failure YAML gets its turn (JSON
        # with YAML comments is fine there) and reports the error with a position.
        value = _json_or_none(stripped)
        if value is not None:
            problem = budget.json_document(value)
            if problem is not None:
                raise InvalidManifest(f"{context}, document 1: {problem}")
            return [value]
    return _yaml_documents(context, text, budget)


def _json_or_none(text: str) -> Any:
    """The JSON value of ``text`` (an object or an array, never None), or None."""
    try:
        return json.loads(text, parse_constant=_refuse_constant)
    except (ValueError, RecursionError):  # RecursionError: nested too deeply for json
        return None


def _yaml_documents(context: str, text: str, budget: ValueBudget) -> list[Any]:
    documents: list[Any] = []
    problem: str | None = None
    try:
        problem = _load_all(text, budget, documents)
    except yaml.MarkedYAMLError as exc:
        # libyaml 0.2.5 stops at 1000 levels on its own: the same limit, said as ours.
        deep = "maximum nesting depth" in (exc.problem or "")
        problem = TOO_DEEP if deep else _describe_yaml_error(exc)
    except _TooManyComposed:
        problem = TOO_MANY_COMPOSED
    except yaml.YAMLError:
        problem = "not valid YAML (unreadable character)"
    except RecursionError:  # PyYAML's composer recurses, two frames a level
        problem = TOO_DEEP
    if problem is not None:
        # Raised outside the except block so PyYAML's message, which quotes the input,
        # is not chained onto ours and cannot reach a traceback in the logs.
        raise InvalidManifest(f"{context}, document {len(documents) + 1}: {problem}")
    return documents


def _load_all(text: str, budget: ValueBudget, documents: list[Any]) -> str | None:
    """Fill ``documents`` one by one, so an error can name its document; stop at the
    first document over a limit and return that limit's message."""
    loader = _Loader(text)  # PyYAML's pure-Python reader may refuse the text already
    try:
        while loader.check_node():
            problem = budget.next_document() or _load_next(loader, budget, documents)
            if problem is not None:
                return problem
    finally:
        loader.dispose()
    return None


def _load_next(loader: _Loader, budget: ValueBudget, documents: list[Any]) -> str | None:
    """Compose the next document, check its limits, and only then construct it, which
    is where aliases would be expanded (YAML merge keys) or shared."""
    # PyYAML's composer records a document's anchors in this dict, then starts the
    # next document with a new one: after get_node it holds this document's anchors.
    anchors = loader.anchors
    node = loader.get_node()
    problem = budget.yaml_document(node, anchored=bool(anchors))
    if problem is None:
        documents.append(loader.construct_document(node))
    return problem


def _objects(context: str, document: Any) -> Iterator[dict[str, Any]]:
    """The objects of one document: nothing, one object, or the items of a list."""
    if document is None:
        return
    if isinstance(document, list):
        for index, item in enumerate(document, start=1):
            yield from _list_item(f"{context}, item {index}", item)
    elif isinstance(document, dict):
        if _is_list_kind(document):
            for index, item in enumerate(document["items"], start=1):
                yield from _list_item(f"{context}, item {index}", item)
        else:
            yield _checked(context, document)
    else:
        raise InvalidManifest(f"{context}: expected an object, found {_type_name(document)}")


def _list_item(context: str, item: Any) -> Iterator[dict[str, Any]]:
    if not isinstance(item, dict):
        raise InvalidManifest(f"{context}: expected an object, found {_type_name(item)}")
    yield from _objects(context, item)


def _is_list_kind(document: Mapping[str, Any]) -> bool:
    # kubectl's rule: a "...List" kind with an items array is a list, whatever its group.
    kind, items = document.get("kind"), document.get("items")
    return isinstance(kind, str) and kind.endswith("List") and isinstance(items, list)


def _checked(context: str, obj: dict[str, Any]) -> dict[str, Any]:
    metadata = obj.get("metadata")
    metadata = metadata if isinstance(metadata, dict) else {}
    fields = {
        "apiVersion": obj.get("apiVersion"),
        "kind": obj.get("kind"),
        "metadata.name": metadata.get("name"),
    }
    missing = [field for field, value in fields.items() if not isinstance(value, str) or not value]
    if missing:
        raise InvalidManifest(f"{context}: object has no {', '.join(missing)}")
    if not isinstance(metadata.get("namespace") or "", str):
        raise InvalidManifest(f"{context}: metadata.namespace must be a string")
    return obj


def _type_name(value: Any) -> str:
    if isinstance(value, str):
        return "a string"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    return "a " + type(value).__name__


# --- YAML ---------------------------------------------------------------------------

if yaml.__with_libyaml__:
    from yaml._yaml import CParser
    from yaml.composer import Composer
    from yaml.constructor import SafeConstructor
    from yaml.resolver import Resolver

    class _BaseLoader(Composer, CParser, SafeConstructor, Resolver):
        """libyaml's parser (~10x faster than PyYAML's on Calico's 700 KB) with PyYAML's
        Python composer in front of libyaml's: the C composer recurses on the C stack and
        crashes the whole process on a deeply nested value (``[[[[…``), while the Python
        one raises RecursionError, which becomes an error for that resource only."""

        def __init__(self, stream: str) -> None:
            CParser.__init__(self, stream)
            Composer.__init__(self)
            SafeConstructor.__init__(self)
            Resolver.__init__(self)

else:  # pragma: no cover - PyYAML built without libyaml
    _BaseLoader = yaml.SafeLoader  # type: ignore[misc, assignment]


class _TooManyComposed(yaml.YAMLError):
    """More than MAX_COMPOSED_NODES nodes composed from one value."""


_MERGE_NEEDS = "a merge key needs a mapping or a list of mappings"
_KEY_NEEDS = "a mapping key must be a string, a boolean or a signed 64-bit number"


class _Loader(_BaseLoader):
    """SafeLoader resolving scalars like go-yaml v2 does for ``interface{}`` targets,
    refusing a value past MAX_COMPOSED_NODES while it is composed."""

    composed = 0  # nodes composed by this loader, all documents together

    def compose_node(self, parent: yaml.Node | None, index: int) -> yaml.Node | None:
        self.composed += 1
        if self.composed > MAX_COMPOSED_NODES:
            raise _TooManyComposed
        return super().compose_node(parent, index)

    def resolve(self, kind: Any, value: Any, implicit: Any) -> str:
        # A plain scalar takes go-yaml's tag (y is a boolean, 1e3 a number), except a
        # ${...} reference, which only PyYAML's resolvers, where it is added, know.
        if kind is yaml.ScalarNode and implicit[0] and not value.startswith("$"):
            tag: str = resolve_plain(value)[0]
            return tag
        tag = super().resolve(kind, value, implicit)  # type: ignore[no-untyped-call]
        return tag

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        # JSON keys are strings: a key go-yaml read as a boolean or number is spelled
        # as sigs.k8s.io/yaml spells it (y: is "true", 1e3: is "1000").
        mapping = super().construct_mapping(node, deep=deep)
        if all(isinstance(key, str) for key in mapping):
            return mapping
        keys = {key: json_key(key) for key in mapping}
        if None in keys.values():
            raise ConstructorError(None, None, _KEY_NEEDS, node.start_mark)
        return {keys[key]: value for key, value in mapping.items()}

    def flatten_mapping(self, node: yaml.MappingNode) -> None:
        """Merge keys as go-yaml v2 reads them: a ``<<`` entry's pairs stand where it
        stands, so keys after it override them and keys before it are overridden;
        of a list of mappings, the earlier ones win."""
        if all(key.tag != MERGE for key, _ in node.value):
            return
        pairs: list[tuple[yaml.Node, yaml.Node]] = []
        for key, value in node.value:
            if key.tag != MERGE:
                pairs.append((key, value))
                continue
            merged = value.value if isinstance(value, yaml.SequenceNode) else [value]
            for source in reversed(merged):
                if not isinstance(source, yaml.MappingNode):
                    raise ConstructorError(None, None, _MERGE_NEEDS, source.start_mark)
                self.flatten_mapping(source)
                pairs.extend(source.value)
        node.value = pairs


def _construct_text(loader: yaml.SafeLoader, node: yaml.Node) -> Any:
    return loader.construct_scalar(node)  # type: ignore[arg-type]


def _construct_resolved(loader: yaml.SafeLoader, node: yaml.Node) -> Any:
    """A boolean, number or null read as go-yaml reads the text, whether its tag was
    resolved or written (``!!int 0o17`` is 15, ``!!float 1`` is 1.0)."""
    text = loader.construct_scalar(node)  # type: ignore[arg-type]
    tag, value = resolve_plain(text)
    if tag == INT and node.tag == FLOAT:
        tag, value = FLOAT, float(value)
    if tag == FLOAT and not math.isfinite(value):
        # .nan and .inf have no JSON form: the apply request could not carry them
        # (go-yaml reads them, and kubectl then fails to encode the object).
        tag = "not finite"
    if tag != node.tag:
        what = _READ_AS.get(node.tag, "its tag says")
        raise ConstructorError(None, None, f"the value cannot be read as {what}", node.start_mark)
    return value


_READ_AS = {BOOL: "a boolean", INT: "an integer", FLOAT: "a finite number", NULL: "null"}


def _refuse_constant(name: str) -> Any:
    raise ValueError("NaN and Infinity are not JSON")


def _construct_map(loader: yaml.SafeLoader, node: yaml.Node) -> Any:
    return loader.construct_yaml_map(node)


def _construct_seq(loader: yaml.SafeLoader, node: yaml.Node) -> Any:
    return loader.construct_yaml_seq(node)


# Dates and binary would not survive JSON encoding for the apply request; "=" would
# be refused by PyYAML although go-yaml reads it as a plain string.
for _tag in ("timestamp", "binary", "value"):
    _Loader.add_constructor(f"tag:yaml.org,2002:{_tag}", _construct_text)
for _tag in (BOOL, INT, FLOAT, NULL):
    _Loader.add_constructor(_tag, _construct_resolved)
# "<<" anywhere but a key is the plain string go-yaml reads.
_Loader.add_constructor(MERGE, _construct_text)
# A Python set or a list of tuples would not survive JSON encoding either: read
# these as the plain mapping and sequence they are written as.
_Loader.add_constructor("tag:yaml.org,2002:set", _construct_map)
for _tag in ("omap", "pairs"):
    _Loader.add_constructor(f"tag:yaml.org,2002:{_tag}", _construct_seq)


def _construct_placeholder(loader: yaml.SafeLoader, node: yaml.Node) -> Any:
    return Placeholder(loader.construct_scalar(node))  # type: ignore[arg-type]


# A plain scalar that is exactly one ${...} reference takes its value's type when
# substituted, so it is marked here, where plain and quoted can still be told apart:
# implicit resolvers only ever see plain scalars, never quoted or explicitly tagged ones.
_Loader.add_implicit_resolver(PLACEHOLDER_TAG, re.compile(REFERENCE.pattern + r"\Z"), ["$"])
_Loader.add_constructor(PLACEHOLDER_TAG, _construct_placeholder)

# A quoted fragment of a PyYAML message; fragments can be input, so only the
# parser's own token names ('<block end>') and single punctuation are kept.
_QUOTED = re.compile(r"""'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*\"""")
_SAFE_QUOTED = re.compile(r"""^['"](<[a-z ]+>|[^\w\s])['"]$""")


def _describe_yaml_error(exc: yaml.MarkedYAMLError) -> str:
    problem = exc.problem or exc.context or "invalid YAML"
    problem = _QUOTED.sub(lambda m: m[0] if _SAFE_QUOTED.match(m[0]) else "'…'", problem)
    mark = exc.problem_mark or exc.context_mark
    position = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
    return f"invalid YAML{position}: {problem[:200]}"
