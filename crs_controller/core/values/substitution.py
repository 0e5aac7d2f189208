"""Per-cluster values in a resource's manifests: clusterctl's ``${VAR}``, made safe.

clusterctl substitutes text and parses the result, so a value holding a newline, a
``---`` or ``kind:`` can add fields, objects or whole documents. Here the manifests
are parsed first and only string values (never keys) are rewritten: text from a label
or a ``value`` can change what a string says and nothing else. A plain YAML scalar
that is exactly one reference (``mtu: ${MTU}``, marked by the loader as a
:class:`Placeholder`) takes the type of its value, as clusterctl's users expect: a
scalar read by the same YAML rules as the manifests, or a topology variable's JSON
as the Cluster holds it, which may be a list or a mapping put where that scalar
stood. No value adds a key beside it, another object or a document, and what one
puts in is bounded as a manifest is (MAX_STRUCTURED_NODES a value, MAX_DEPTH levels,
MAX_NODES a call); a substituted object's identity fields are checked again.

Values come from the Cluster only (built-ins, ``clusterField``, topology variables)
or from the ClusterResourceSet itself; nothing here reads a Secret or another object.
"""

from __future__ import annotations

import copy
import functools
import json
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from crs_controller.core.errors import CRSError, InvalidManifest
from crs_controller.core.manifests.hashing import object_hash
from crs_controller.core.manifests.limits import MAX_DEPTH, MAX_NODES, json_size
from crs_controller.core.manifests.placeholder import Placeholder
from crs_controller.core.manifests.scalars import BOOL, FLOAT, INT, NULL, resolve_plain

__all__ = [
    "MAX_PATH_LENGTH",
    "MAX_STRUCTURED_NODES",
    "MAX_TOTAL_CHARS",
    "MAX_VALUE_CHARS",
    "PATH_PATTERN",
    "Placeholder",
    "RefusedValue",
    "TopologyString",
    "UnresolvedVariable",
    "VariableSpec",
    "cluster_values",
    "field_path_problem",
    "readable_part",
    "resolvable",
    "substitute",
    "values_digest",
    "where_looked",
]

# A substituted string may not grow past this, nor all of one call's together past
# the total: a value used a thousand times must not cost the controller gigabytes.
MAX_VALUE_CHARS = 1 << 20
MAX_TOTAL_CHARS = 8 << 20
MAX_PATH_LENGTH = 1024
# A value that is JSON (a topology variable, a clusterField that is no string) holds at
# most this many nodes, and nests no deeper than a manifest may. Measured where it is
# read, with no copy: a ClusterClass variable is some tens of nodes; a Cluster's 1.5 MiB
# could hold 350,000, each copied and walked per resource on the event loop.
MAX_STRUCTURED_NODES = 10_000


@dataclass(frozen=True)
class VariableSpec:
    """One ``spec.variables`` entry: at most one of value, cluster_field and
    topology_variable is expected; the first set, in that order, is the source."""

    name: str
    value: str | None = None
    cluster_field: str | None = None
    topology_variable: str | None = None
    default: str | None = None


class UnresolvedVariable(CRSError):
    """A reference to a variable with no value and no inline default."""

    reason = "UnresolvedVariable"

    def __init__(self, message: str, *, variable: str = "") -> None:
        super().__init__(message)
        self.variable = variable


@dataclass(frozen=True)
class RefusedValue:
    """A variable whose value the Cluster holds but that cannot be used (too large or
    too deep); ``problem`` names where it was read and the limit, never the value. A
    resource that uses it fails on that cluster as UnresolvedVariable."""

    problem: str


class TopologyString(str):
    """A topology variable whose JSON value is a string. It is put in as is, where
    text from a label or a ``value`` is read by YAML's rules in a typed placeholder:
    a ClusterClass variable declared a string must not turn into a number."""

    __slots__ = ()


# --- clusterField paths ---------------------------------------------------------------

_IDENT = r"[A-Za-z_][A-Za-z0-9_]*"
_SEGMENT = rf"(?:\.{_IDENT}|\['(?:[^'\\]|\\['\\])+'\]|\[(?:0|[1-9][0-9]*)\])"
# For the CRD's `pattern:` (RE2 and Python alike). It accepts exactly the paths
# field_path_problem accepts, except for length: give the field maxLength too.
PATH_PATTERN = (
    r"^(?:metadata\.(?:name|namespace)"
    rf"|(?:metadata\.(?:labels|annotations)|spec|status){_SEGMENT}*)$"
)

_ROOTS_WITHOUT_FIELDS = ("metadata.name", "metadata.namespace")
_ROOTS_WITH_FIELDS = ("metadata.labels", "metadata.annotations", "spec", "status")
_ROOTS = _ROOTS_WITHOUT_FIELDS + _ROOTS_WITH_FIELDS


def readable_part(cluster: Mapping[str, Any]) -> dict[str, Any]:
    """What of a Cluster any variable can read: the fields under the roots a
    ``clusterField`` path may start at, which hold every built-in and the topology
    variables too. The rest (managedFields, owner references, finalizers...) need not
    be kept to compute ``cluster_values``."""
    kept: dict[str, Any] = {}
    for root in _ROOTS:
        *parents, last = root.split(".")
        source: Any = cluster
        target = kept
        for parent in parents:
            source = source.get(parent) if isinstance(source, Mapping) else None
            target = target.setdefault(parent, {})
        if isinstance(source, Mapping) and last in source:
            target[last] = source[last]
    return kept


_FIELD = re.compile(rf"\.({_IDENT})")
_INDEX = re.compile(r"\[(0|[1-9][0-9]*)\]")

Segment = str | int


def field_path_problem(path: str) -> str | None:
    """What is wrong with a ``clusterField`` path, or None if it is valid. Messages
    quote at most 100 characters of the path."""
    return _parse_path(path)[1]


def _parse_path(path: str) -> tuple[tuple[Segment, ...], str | None]:
    """The segments of a path (``spec.a['k'][0]`` -> spec, a, k, 0), or a problem."""
    if not path:
        return (), "the path is empty"
    if len(path) > MAX_PATH_LENGTH:  # before the cache, which keeps what it is given
        return (), f"the path is longer than {MAX_PATH_LENGTH} characters"
    return _parse_short_path(path)


@functools.lru_cache(maxsize=512)
def _parse_short_path(path: str) -> tuple[tuple[Segment, ...], str | None]:
    # Cached: every cluster of every CRS reads the same few paths.
    root = next((r for r in _ROOTS if _starts_with_root(path, r)), None)
    if root is None:
        return (), (
            f"{_shown(path)} must start with metadata.name, metadata.namespace, "
            "metadata.labels, metadata.annotations, spec or status"
        )
    if root in _ROOTS_WITHOUT_FIELDS and len(path) > len(root):
        return (), f"{_shown(path)}: {root} is a string, it has no fields"
    segments: list[Segment] = list(root.split("."))
    position = len(root)
    while position < len(path):
        found = _segment_at(path, position)
        if isinstance(found, str):
            return (), f"{_shown(path)}: {found}"
        segments.append(found[0])
        position = found[1]
    return tuple(segments), None


def _starts_with_root(path: str, root: str) -> bool:
    return path.startswith(root) and path[len(root) : len(root) + 1] in ("", ".", "[")


def _segment_at(path: str, position: int) -> tuple[Segment, int] | str:
    """The segment starting at ``position`` and where it ends, or what is wrong."""
    if field := _FIELD.match(path, position):
        return field[1], field.end()
    if index := _INDEX.match(path, position):
        return int(index[1]), index.end()
    if path.startswith("['", position):
        return _key_at(path, position)
    column = position + 1
    if path[position] == ".":
        return f"at character {column}: a field name ({_IDENT}) must follow '.'"
    if path[position] == "[":
        return f"at character {column}: expected ['key'] or [N] (N without leading zeros)"
    return f"at character {column}: expected .field, ['key'] or [N]"


def _key_at(path: str, position: int) -> tuple[str, int] | str:
    """A ``['key']`` segment: only ``\\'`` and ``\\\\`` are escapes."""
    key: list[str] = []
    index = position + 2
    while index < len(path):
        char = path[index]
        if char == "\\":
            if path[index + 1 : index + 2] not in ("'", "\\"):
                return f"at character {index + 1}: only \\' and \\\\ are escapes in a key"
            key.append(path[index + 1])
            index += 2
        elif char == "'":
            if path[index + 1 : index + 2] != "]":
                return f"at character {index + 2}: expected ] after the key's closing quote"
            if not key:
                return f"at character {position + 1}: empty key"
            return "".join(key), index + 2
        else:
            key.append(char)
            index += 1
    return f"at character {position + 1}: ['key'] is not closed"


def _shown(text: str, limit: int = 100) -> str:
    return text if len(text) <= limit else text[:limit] + "…"


def _read(document: Any, segments: Sequence[Segment]) -> Any:
    """The value at ``segments``, or None where the document has no such field or
    has one of another type."""
    node = document
    for segment in segments:
        if isinstance(segment, str):
            node = node.get(segment) if isinstance(node, Mapping) else None
        else:
            node = node[segment] if isinstance(node, list) and segment < len(node) else None
        if node is None:
            return None
    return node


# --- what a Cluster defines -----------------------------------------------------------


def _text(value: Any) -> str | None:
    return str(value) if isinstance(value, str) and value else None


def _cidrs(value: Any) -> list[str] | None:
    if not isinstance(value, list) or not value:
        return None
    if not all(isinstance(item, str) and item for item in value):
        return None
    return [str(item) for item in value]


def _first_cidr(value: Any) -> str | None:
    cidrs = _cidrs(value)
    return cidrs[0] if cidrs else None


def _joined_cidrs(value: Any) -> str | None:
    cidrs = _cidrs(value)
    return ",".join(cidrs) if cidrs else None


def _port(value: Any) -> str | None:
    # Cluster API leaves port 0 in an endpoint not known yet.
    valid = isinstance(value, int) and not isinstance(value, bool) and 0 < value < 65536
    return str(value) if valid else None


_PODS = "spec.clusterNetwork.pods.cidrBlocks"
_SERVICES = "spec.clusterNetwork.services.cidrBlocks"
# The same paths in v1beta1 and v1beta2 Clusters.
_BUILTINS: dict[str, tuple[str, Callable[[Any], str | None]]] = {
    "CLUSTER_NAME": ("metadata.name", _text),
    "CLUSTER_NAMESPACE": ("metadata.namespace", _text),
    "POD_CIDR": (_PODS, _first_cidr),
    "POD_CIDRS": (_PODS, _joined_cidrs),
    "SERVICE_CIDR": (_SERVICES, _first_cidr),
    "SERVICE_CIDRS": (_SERVICES, _joined_cidrs),
    "SERVICE_DOMAIN": ("spec.clusterNetwork.serviceDomain", _text),
    "CONTROL_PLANE_HOST": ("spec.controlPlaneEndpoint.host", _text),
    "CONTROL_PLANE_PORT": ("spec.controlPlaneEndpoint.port", _port),
    "KUBERNETES_VERSION": ("spec.topology.version", _text),
}

_NO_OVERRIDES: Mapping[str, str] = MappingProxyType({})


def cluster_values(
    cluster: Mapping[str, Any],
    variables: Sequence[VariableSpec],
    overrides: Mapping[str, str] = _NO_OVERRIDES,
) -> dict[str, Any]:
    """Every variable defined for ``cluster``: the built-ins it has the fields for,
    then ``variables`` (an entry replaces a built-in of its name, even when it ends up
    with no value), then ``overrides``. Values are str, a topology variable's JSON, or
    a RefusedValue for JSON past the limits (MAX_STRUCTURED_NODES, MAX_DEPTH).
    Odd Cluster content (a field of the wrong type) counts as absent, never raises.

    JSON values are the Cluster's own objects, not copies: nothing changes them
    (substitution copies what it inserts). Each field is read once, however many
    entries name it."""
    values: dict[str, Any] = {}
    for name, (path, read) in _BUILTINS.items():
        value = read(_read(cluster, _parse_path(path)[0]))
        if value is not None:
            values[name] = value
    read_once = _Reader(cluster)
    for spec in _by_name(variables).values():
        found = _variable_value(read_once, spec)
        if found is None:
            values.pop(spec.name, None)
        else:
            values[spec.name] = found
    values.update(overrides)
    return values


def resolvable(used: frozenset[str], values: Mapping[str, Any]) -> bool:
    """Whether every name in ``used`` has a value that can be put in; False means a
    substitution would say what is wrong (or take an inline default)."""
    return all(name in values and not isinstance(values[name], RefusedValue) for name in used)


def _by_name(variables: Sequence[VariableSpec]) -> dict[str, VariableSpec]:
    # The CRD keys the list by name; should two entries share one, the last wins.
    return {spec.name: spec for spec in variables}


class _Reader:
    """A Cluster's fields and topology variables, each read (and measured) once."""

    def __init__(self, cluster: Mapping[str, Any]) -> None:
        self.cluster = cluster
        self.read: dict[tuple[str, str], Any] = {}

    def field(self, path: str) -> Any:
        return self._once(("field", path), self._field)

    def topology(self, name: str) -> Any:
        return self._once(("topology", name), self._topology)

    def _once(self, key: tuple[str, str], read: Callable[[str], Any]) -> Any:
        if key not in self.read:
            self.read[key] = read(key[1])
        return self.read[key]

    def _field(self, path: str) -> Any:
        segments, problem = _parse_path(path)
        if problem:
            return None
        value = _read(self.cluster, segments)
        refused = _refusal(value, f"field {_shown(path)} of the Cluster")
        return refused or _field_text(value)

    def _topology(self, name: str) -> Any:
        value = _topology_value(self.cluster, name)
        return _refusal(value, f"topology variable {_shown(name)}") or value


def _refusal(value: Any, where: str) -> RefusedValue | None:
    """A RefusedValue for JSON past the limits, else None."""
    nodes, depth = json_size(value, max_nodes=MAX_STRUCTURED_NODES, max_depth=MAX_DEPTH)
    if nodes > MAX_STRUCTURED_NODES:
        return RefusedValue(f"{where} holds more than {MAX_STRUCTURED_NODES} nodes")
    if depth > MAX_DEPTH:
        return RefusedValue(f"{where} is nested deeper than {MAX_DEPTH} levels")
    return None


def _variable_value(reader: _Reader, spec: VariableSpec) -> Any:
    """The entry's value, its default when that is absent or empty, else None."""
    found = _source_value(reader, spec)
    if found is None or (isinstance(found, str) and not found):
        return spec.default
    return found


def _source_value(reader: _Reader, spec: VariableSpec) -> Any:
    if spec.value is not None:
        return spec.value
    if spec.cluster_field is not None:
        return reader.field(spec.cluster_field)
    if spec.topology_variable is not None:
        return reader.topology(spec.topology_variable)
    return None


def _field_text(value: Any) -> str | None:
    """A Cluster field as text: strings as they are, anything else as compact JSON
    (``6443``, ``true``, ``["10.0.0.0/8"]``)."""
    if value is None:
        return None
    if isinstance(value, str):
        return str(value)
    return _compact_json(value)


def _topology_value(cluster: Mapping[str, Any], name: str) -> Any:
    """The value of the first ``spec.topology.variables`` entry named ``name``."""
    entries = _read(cluster, ("spec", "topology", "variables"))
    for entry in entries if isinstance(entries, list) else ():
        if isinstance(entry, Mapping) and entry.get("name") == name:
            value = entry.get("value")
            return TopologyString(value) if isinstance(value, str) else value
    return None


def where_looked(variable: str, variables: Sequence[VariableSpec]) -> str:
    """Where ``variable``'s value comes from, for the message of an unresolved one."""
    spec = _by_name(variables).get(variable)
    if spec is None:
        builtin = _BUILTINS.get(variable)
        return f"built-in: {builtin[0]}" if builtin else "no such variable"
    if spec.value is not None:
        return "its value in spec.variables is empty"
    if spec.cluster_field is not None:
        return _describe_field(spec.cluster_field)
    if spec.topology_variable is not None:
        return f"topology variable {_shown(spec.topology_variable)}"
    return "spec.variables gives it no value"


def _describe_field(path: str) -> str:
    segments, problem = _parse_path(path)
    if problem is None and len(segments) == 3 and isinstance(segments[2], str):
        kind = {"labels": "label", "annotations": "annotation"}.get(str(segments[1]))
        if segments[0] == "metadata" and kind:
            return f"{kind} {_shown(segments[2])} of the Cluster"
    return f"field {_shown(path)} of the Cluster"


# --- substitution ---------------------------------------------------------------------

# "$${" first: at the same position the escape wins over a reference.
_TOKEN = re.compile(r"\$\$\{|\$\{([^}]*)(\})?")
_BODY = re.compile(rf"({_IDENT})(?::([=-])(.*))?", re.DOTALL)
_NAME_RULE = f"a reference is ${{NAME}}, ${{NAME:=default}} or ${{NAME:-default}}, NAME {_IDENT}"


@dataclass(frozen=True)
class _Reference:
    name: str
    default: str | None  # None: the reference has no inline default


def _parse_reference(body: str, *, closed: bool) -> _Reference | str:
    """The reference whose text between ``${`` and ``}`` is ``body``, or what is wrong."""
    if not closed:
        return "${ is not closed by }"
    if "${" in body:  # a default holding a reference: refused rather than guessed at
        return "a reference cannot hold another ${"
    parsed = _BODY.fullmatch(body)
    if parsed is None:
        return "empty variable name" if not body else _NAME_RULE
    return _Reference(parsed[1], parsed[3] if parsed[2] else None)


_SECRET = re.compile(r"Secret\b")


def substitute(
    objects: Sequence[dict[str, Any]],
    values: Mapping[str, Any],
    *,
    resource: str,
    variables: Sequence[VariableSpec] = (),
    secret: bool | None = None,
) -> tuple[list[dict[str, Any]], frozenset[str]]:
    """Copies of ``objects`` with every string value's references replaced, and the
    names referenced (the same whatever the values, so a caller may cache by them).

    ``resource`` names the source in messages. ``secret``: the objects come from a
    Secret, so messages give positions and never quote text; by default, when
    ``resource`` names a Secret (``Secret ns/name``, ``Secret/name``). Raises InvalidManifest for a
    malformed reference or an oversized result, UnresolvedVariable for a variable with
    no value and no inline default."""
    quote = not (_SECRET.match(resource) if secret is None else secret)
    run = _Substitution(values, resource, variables, quote)
    copies = [run.object(obj) for obj in objects]
    return copies, frozenset(run.used)


class _Substitution:
    """One substitute() call: its values, what it used, and how much it produced."""

    def __init__(
        self,
        values: Mapping[str, Any],
        resource: str,
        variables: Sequence[VariableSpec],
        quote: bool,
    ) -> None:
        self.values = values
        self.resource = resource
        self.variables = variables
        self.quote = quote
        self.used: set[str] = set()
        self.label = ""
        self.produced = 0
        self.nodes = 0  # inserted by typed placeholders as lists and mappings

    def object(self, obj: dict[str, Any]) -> dict[str, Any]:
        self.label = _object_label(obj)
        copied: dict[str, Any] = self.node(obj, ())
        # Checked again: a value can make a name a number, or metadata a list, and an
        # object must not go out, nor be recorded, under an identity it cannot have.
        problem = _identity_problem(copied)
        if problem is not None and _identity_problem(obj) is None:
            raise InvalidManifest(f"{self.resource}: {self.label}: substituted, {problem}")
        return copied

    def node(self, value: Any, path: tuple[Segment, ...]) -> Any:
        if isinstance(value, str):
            return self.string(value, path)
        if isinstance(value, dict):
            # Keys are copied, never substituted: a value must not name a field.
            return {_plain(k): self.node(v, (*path, str(k))) for k, v in value.items()}
        if isinstance(value, list):
            return [self.node(item, (*path, index)) for index, item in enumerate(value)]
        return copy.deepcopy(value)

    def string(self, text: str, path: tuple[Segment, ...]) -> Any:
        if "${" not in text:
            return str(text)
        parts = self.scan(text, path)
        if isinstance(text, Placeholder) and len(parts) == 1 and isinstance(parts[0], _Reference):
            return self.typed(parts[0], path)
        pieces = [part if isinstance(part, str) else self.text_of(part, path) for part in parts]
        return self.spend(path, "".join(pieces))

    def scan(self, text: str, path: tuple[Segment, ...]) -> list[str | _Reference]:
        """The literal runs and the references of ``text``, in order."""
        parts: list[str | _Reference] = []
        position = 0
        for match in _TOKEN.finditer(text):
            parts.append(text[position : match.start()])
            if match[0] == "$${":
                parts.append("${")
            else:
                parts.append(self.reference(match, text, path))
            position = match.end()
        parts.append(text[position:])
        return [part for part in parts if part != ""]

    def reference(self, match: re.Match[str], text: str, path: tuple[Segment, ...]) -> _Reference:
        found = _parse_reference(match[1], closed=match[2] is not None)
        if isinstance(found, str):
            raise InvalidManifest(self.malformed(found, text, match.start(), path))
        return found

    def malformed(self, problem: str, text: str, start: int, path: tuple[Segment, ...]) -> str:
        where = f"{self.resource}: {self.label}, {_dotted(path)}"
        message = f"{where}: malformed reference at character {start + 1}: {problem}"
        if not self.quote:  # a Secret's text never reaches a condition
            return message
        return f"{message}: {_shown(text[start:], 60)!r}"

    def value(self, ref: _Reference, path: tuple[Segment, ...]) -> Any:
        """The value a reference stands for; its inline default when the variable is
        unset or empty."""
        self.used.add(ref.name)
        value = self.values.get(ref.name)
        if ref.default is not None and (value is None or value == ""):
            return ref.default
        if value is None:
            where = where_looked(ref.name, self.variables)
            raise UnresolvedVariable(
                f"{self.resource}: variable {ref.name} has no value ({where}); "
                f"used by {self.label}, {_dotted(path)}",
                variable=ref.name,
            )
        if isinstance(value, RefusedValue):
            raise UnresolvedVariable(
                f"{self.resource}: variable {ref.name} cannot be used: {value.problem}; "
                f"used by {self.label}, {_dotted(path)}",
                variable=ref.name,
            )
        return value

    def text_of(self, ref: _Reference, path: tuple[Segment, ...]) -> str:
        value = self.value(ref, path)
        return str(value) if isinstance(value, str) else _compact_json(value)

    def typed(self, ref: _Reference, path: tuple[Segment, ...]) -> Any:
        """A plain scalar that is one reference: the value's own type."""
        value = self.value(ref, path)
        if isinstance(value, TopologyString):
            return self.spend(path, str(value))
        if isinstance(value, str):
            return _scalar(self.spend(path, str(value)))
        self.shape(ref, path, value)
        self.spend(path, _compact_json(value))  # only measured
        return copy.deepcopy(value)

    def shape(self, ref: _Reference, path: tuple[Segment, ...], value: Any) -> None:
        """Refuse a list or mapping that would take the object past a manifest's
        limits: deeper than MAX_DEPTH, or all of one call's together over MAX_NODES."""
        room = MAX_DEPTH - len(path)  # the object is a level, each segment one more
        nodes, depth = json_size(value, max_nodes=MAX_NODES - self.nodes, max_depth=room)
        self.nodes += nodes
        limit = None
        if depth > room:
            limit = f"the value of {ref.name} would nest it deeper than {MAX_DEPTH} levels"
        elif self.nodes > MAX_NODES:
            limit = f"substituted values would add more than {MAX_NODES} nodes"
        if limit is not None:
            raise InvalidManifest(f"{self.resource}: {self.label}, {_dotted(path)}: {limit}")

    def spend(self, path: tuple[Segment, ...], produced: str) -> str:
        """``produced``, once checked against the size limits."""
        self.produced += len(produced)
        limit = None
        if len(produced) > MAX_VALUE_CHARS:
            limit = f"a substituted value would be longer than {MAX_VALUE_CHARS} characters"
        elif self.produced > MAX_TOTAL_CHARS:
            limit = f"substituted values would be longer than {MAX_TOTAL_CHARS} characters"
        if limit is not None:
            raise InvalidManifest(f"{self.resource}: {self.label}, {_dotted(path)}: {limit}")
        return produced


_SCALAR_TAGS = frozenset({BOOL, INT, FLOAT, NULL})


def _scalar(text: str) -> Any:
    """``text`` read as a plain YAML scalar written in its place would be, when that
    is a number, a boolean or null; else ``text`` itself. Never a mapping or a list:
    read by go-yaml's rules, as the manifests are, so ``y`` is true and ``10:30`` a
    string here and there alike."""
    if "\n" in text:
        return text
    tag, value = resolve_plain(text)
    if tag not in _SCALAR_TAGS or (tag == FLOAT and not math.isfinite(value)):
        return text  # .nan, .inf: no JSON number
    return value


def _compact_json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), sort_keys=True, ensure_ascii=False)


def _identity_problem(obj: Mapping[str, Any]) -> str | None:
    """What is wrong with an object's identity fields (named, never quoted), or None."""
    metadata = obj.get("metadata")
    if not isinstance(metadata, dict):
        return "metadata must be a mapping"
    fields = {
        "apiVersion": obj.get("apiVersion"),
        "kind": obj.get("kind"),
        "metadata.name": metadata.get("name"),
    }
    for field, value in fields.items():
        if not isinstance(value, str) or not value:
            return f"{field} must be a non-empty string"
    namespace = metadata.get("namespace")
    if namespace is not None and not isinstance(namespace, str):
        return "metadata.namespace must be a string"
    return None


def _plain(key: Any) -> Any:
    return str(key) if isinstance(key, Placeholder) else key


def _object_label(obj: Mapping[str, Any]) -> str:
    """``ConfigMap kube-system/cfg``: how messages name an object of a resource."""
    metadata = obj.get("metadata")
    metadata = metadata if isinstance(metadata, Mapping) else {}
    kind, name, namespace = obj.get("kind"), metadata.get("name"), metadata.get("namespace")
    kind = kind if isinstance(kind, str) and kind else "object"
    name = name if isinstance(name, str) and name else "<unnamed>"
    return (
        f"{kind} {namespace}/{name}"
        if isinstance(namespace, str) and namespace
        else f"{kind} {name}"
    )


_PLAIN_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*")


def _dotted(path: Sequence[Segment]) -> str:
    """``data.config``, ``spec.containers[0].env``, ``data['ca.crt']``."""
    parts: list[str] = []
    for segment in path:
        if isinstance(segment, int):
            parts.append(f"[{segment}]")
        elif _PLAIN_KEY.fullmatch(segment):
            parts.append(f".{segment}" if parts else segment)
        else:
            parts.append(f"[{_shown(segment, 60)!r}]")
    return "".join(parts) or "(the object)"


# --- the per-cluster hash -------------------------------------------------------------


def values_digest(used: frozenset[str], values: Mapping[str, Any]) -> str:
    """``xxh3:…`` over the used names and their values: what, with the source's hash,
    decides whether a cluster's substituted resource changed. An unset name counts
    (its inline default is in use), and a topology string differs from the same text
    from elsewhere (only text is read by YAML's rules in a typed placeholder)."""
    entries = [_digest_entry(name, values.get(name)) for name in sorted(used)]
    return object_hash({"values": entries})


def _digest_entry(name: str, value: Any) -> list[Any]:
    if value is None:
        return [name]
    if isinstance(value, str) and not isinstance(value, TopologyString):
        return [name, "text", str(value)]
    return [name, "json", str(value) if isinstance(value, str) else value]
