"""Fields left to others (``spec.ignore``): JSON pointers (RFC 6901) into the objects
a CRS applies. An ignored path is sent when the object is created, then left out of
every later apply and of drift checks, so that another controller (an HPA scaling a
Deployment, say) owns it and we never take it back.

Compiled once when the CRS is parsed (core/spec/objects). Everything here is pure: which
rules target an object, removing paths from an object's body (a copy), and removing
them from the fieldsV1 of managedFields, where drift checks read ownership.

List items: in a body a numeric segment indexes the list. In fieldsV1 list items are
named by key (``k:{...}``), value (``v:...``) or position (``i:N``), never by the
position of a keyed item, and drift checks read metadata only, so a numeric segment
matches ``i:N`` and every keyed or valued item of that list: drift does not look at
that field in any item. A pointer ending on a list item itself removes nothing
(positions shift as items go: only fields inside items, or whole lists, can be left
out).
"""

from __future__ import annotations

import copy
import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from crs_controller.core.api.models import IgnoreRule, ObjectKey, ObjectRef
from crs_controller.core.errors import InvalidSpec

__all__ = [
    "NO_IGNORES",
    "Ignores",
    "Pointer",
    "Rule",
    "Target",
    "compile_ignores",
    "leave_out",
    "parse_pointer",
    "strip_fields",
]

_BAD_ESCAPE = re.compile(r"~(?![01])")
_INDEX = re.compile(r"^(0|[1-9][0-9]*)$")  # RFC 6901: no leading zeros
# What names the object: always sent, or the apply could not say what it is about.
_IDENTITY = {
    ("apiVersion",),
    ("kind",),
    ("metadata",),
    ("metadata", "name"),
    ("metadata", "namespace"),
}


@dataclass(frozen=True)
class Pointer:
    """A JSON pointer, unescaped into its segments (at least one)."""

    segments: tuple[str, ...]

    def __str__(self) -> str:
        return "".join("/" + s.replace("~", "~0").replace("/", "~1") for s in self.segments)


def parse_pointer(text: str) -> Pointer:
    """``text`` as a Pointer; ValueError (never quoting it) when it is not one, or
    when it names what identifies the object."""
    if not text.startswith("/"):
        raise ValueError("a JSON pointer starts with '/'")
    raw = text[1:].split("/")
    if any(_BAD_ESCAPE.search(segment) for segment in raw):
        raise ValueError("'~' must be followed by 0 or 1 (RFC 6901)")
    pointer = Pointer(tuple(s.replace("~1", "/").replace("~0", "~") for s in raw))
    if pointer.segments in _IDENTITY:
        raise ValueError("names what identifies the object, which every apply sends")
    return pointer


@dataclass(frozen=True)
class Target:
    """Which objects a rule is about: each field given must equal the object's."""

    group: str | None = None
    version: str | None = None
    kind: str | None = None
    name: str | None = None
    namespace: str | None = None

    def matches(self, ref: ObjectRef) -> bool:
        version = ref.api_version.rpartition("/")[2]
        pairs = (
            (self.group, ref.group),
            (self.version, version),
            (self.kind, ref.kind),
            (self.name, ref.name),
            (self.namespace, ref.namespace),
        )
        return all(wanted is None or wanted == actual for wanted, actual in pairs)


@dataclass(frozen=True)
class Rule:
    target: Target
    paths: tuple[Pointer, ...]


@dataclass(frozen=True)
class Ignores:
    """A CRS's compiled ``spec.ignore``."""

    rules: tuple[Rule, ...] = ()

    def paths_for(self, ref: ObjectRef) -> tuple[Pointer, ...]:
        """The paths every rule targeting ``ref`` ignores (empty: no rule targets it)."""
        found: dict[Pointer, None] = {}
        for rule in self.rules:
            if rule.target.matches(ref):
                found.update(dict.fromkeys(rule.paths))
        return tuple(found)

    def left_out(self, ref: ObjectRef, inventory: Collection[ObjectKey]) -> tuple[Pointer, ...]:
        """What an apply of ``ref`` leaves out: nothing while it is being created (not
        yet in the resource's ``inventory``), its ignored paths ever after."""
        return self.paths_for(ref) if ref.key in inventory else ()


NO_IGNORES = Ignores()


def compile_ignores(rules: Sequence[IgnoreRule]) -> Ignores:
    """``spec.ignore`` compiled; InvalidSpec names the first bad path."""
    compiled = []
    for i, rule in enumerate(rules):
        paths = []
        for j, text in enumerate(rule.paths):
            try:
                paths.append(parse_pointer(text))
            except ValueError as exc:
                raise InvalidSpec(f"spec.ignore[{i}].paths[{j}]: {exc}") from None
        target = Target(**rule.target.model_dump())
        compiled.append(Rule(target, tuple(paths)))
    return Ignores(tuple(compiled))


# --- object bodies ------------------------------------------------------------------


def leave_out(obj: Mapping[str, Any], paths: Sequence[Pointer]) -> dict[str, Any]:
    """A copy of ``obj`` without ``paths``; paths it does not have are no matter."""
    result: dict[str, Any] = copy.deepcopy(dict(obj))
    for pointer in paths:
        _remove(result, pointer.segments)
    return result


def _remove(node: Any, segments: tuple[str, ...]) -> None:
    head, rest = segments[0], segments[1:]
    if isinstance(node, dict):
        if head not in node:
            return
        if rest:
            _remove(node[head], rest)
        else:
            del node[head]
    elif isinstance(node, list) and rest and _INDEX.match(head) and int(head) < len(node):
        _remove(node[int(head)], rest)  # the item itself stays: positions must not shift


# --- managedFields (fieldsV1) -------------------------------------------------------


def strip_fields(fields: Any, paths: Sequence[Pointer]) -> Any:
    """``fields`` (fieldsV1, None for none) without the ownership of ``paths``. A map
    left empty by the removal goes too: in fieldsV1 an empty map means a field owned
    whole, which a removal must never make up."""
    if fields is None or not paths:
        return fields
    result = copy.deepcopy(fields)
    for pointer in paths:
        if isinstance(result, dict):
            _strip(result, pointer.segments)
    return result


def _strip(node: dict[str, Any], segments: tuple[str, ...]) -> bool:
    """Remove ``segments`` under ``node``; True when something was removed."""
    head, rest = segments[0], segments[1:]
    removed = False
    for key in _field_keys(node, head, last=not rest):
        if not rest:
            del node[key]
            removed = True
            continue
        child = node[key]
        if isinstance(child, dict) and child and _strip(child, rest):
            removed = True
            if not child:
                del node[key]
    return removed


def _field_keys(node: Mapping[str, Any], segment: str, *, last: bool) -> list[str]:
    """The keys of ``node`` a pointer segment names: the field, and, for an index not
    at the end, the list's items (keyed and valued items by any key, see above)."""
    keys = [f"f:{segment}"] if f"f:{segment}" in node else []
    if not last and _INDEX.match(segment):
        keys += [k for k in node if k == f"i:{segment}" or k.startswith(("k:", "v:"))]
    return keys
