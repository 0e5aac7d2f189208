"""Fields left to others (core/spec/ignore): JSON pointers parsed with their escapes and
refused (InvalidSpec naming spec.ignore[i].paths[j], never the value) when malformed
or naming the object's identity; targets matched like selectors; which paths an
apply leaves out (none at creation); paths removed from a body (nested maps, list
items, absent paths, the input never changed) and from fieldsV1 (keyed, valued and
positional list items, maps emptied by the removal); stripping is idempotent and
touches nothing outside the ignored paths."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from crs_controller.core.api.models import IgnoreRule, ObjectRef
from crs_controller.core.errors import InvalidSpec
from crs_controller.core.spec.ignore import (
    Ignores,
    Pointer,
    Rule,
    Target,
    compile_ignores,
    leave_out,
    parse_pointer,
    strip_fields,
)
from crs_controller.core.spec.objects import parse_crs

# --- pointers -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "segments"),
    [
        ("/spec/replicas", ("spec", "replicas")),
        ("/metadata/annotations/a~1b", ("metadata", "annotations", "a/b")),
        ("/data/~0tilde", ("data", "~tilde")),
        ("/data/~01", ("data", "~1")),  # ~0 first: "~01" is "~1", not "/"
        (
            "/spec/template/spec/containers/0/image",
            ("spec", "template", "spec", "containers", "0", "image"),
        ),
        ("/data/", ("data", "")),  # the empty key is a key
        ("/metadata/labels", ("metadata", "labels")),
    ],
)
def test_pointers_are_unescaped_into_segments(text: str, segments: tuple[str, ...]) -> None:
    pointer = parse_pointer(text)
    assert pointer.segments == segments
    assert str(pointer) == text  # and written back the same


@pytest.mark.parametrize(
    "text",
    [
        "spec/replicas",  # no leading slash
        "/spec/~2x",  # ~ followed by neither 0 nor 1
        "/spec/x~",
        "/kind",  # what identifies the object: every apply sends it
        "/apiVersion",
        "/metadata",
        "/metadata/name",
        "/metadata/namespace",
    ],
)
def test_bad_pointers_are_refused_naming_where_never_the_value(text: str) -> None:
    rules = [
        IgnoreRule(paths=["/spec/replicas"]),
        IgnoreRule(paths=["/data/ok", text]),
    ]
    with pytest.raises(InvalidSpec) as raised:
        compile_ignores(rules)
    assert str(raised.value).startswith("spec.ignore[1].paths[1]: ")
    assert text not in str(raised.value)


def test_a_crs_with_a_bad_pointer_is_invalid_and_one_with_good_ones_is_compiled() -> None:
    def crs(paths: list[str]) -> dict[str, Any]:
        spec = {
            "clusterSelector": {"matchLabels": {"a": "b"}},
            "resources": [{"kind": "ConfigMap", "name": "x"}],
            "ignore": [{"target": {"kind": "Deployment"}, "paths": paths}],
        }
        return {"metadata": {"name": "c", "namespace": "n"}, "spec": spec}

    refused = parse_crs(crs(["replicas"]))
    assert refused.model is None
    assert str(refused.problem) == "spec.ignore[0].paths[0]: a JSON pointer starts with '/'"
    accepted = parse_crs(crs(["/spec/replicas"]))
    rule = Rule(Target(kind="Deployment"), (Pointer(("spec", "replicas")),))
    assert accepted.ignores == Ignores((rule,))


# --- targets ------------------------------------------------------------------------

DEPLOYMENT = ("apps/v1", "Deployment", "web", "front")
CONFIGMAP = ("v1", "ConfigMap", "web", "settings")
NAMESPACE = ("v1", "Namespace", "", "web")


@pytest.mark.parametrize(
    ("target", "ref", "matches"),
    [
        (Target(), DEPLOYMENT, True),  # nothing given: every object
        (Target(), NAMESPACE, True),
        (Target(group="apps", kind="Deployment"), DEPLOYMENT, True),
        (Target(group="apps", kind="Deployment"), CONFIGMAP, False),
        (Target(group="", kind="ConfigMap"), CONFIGMAP, True),  # "" is the core group
        (Target(group=""), DEPLOYMENT, False),
        (Target(version="v1"), DEPLOYMENT, True),
        (Target(version="v1beta1"), DEPLOYMENT, False),
        (Target(name="front", namespace="web"), DEPLOYMENT, True),
        (Target(name="front", namespace="other"), DEPLOYMENT, False),
        (Target(namespace=""), NAMESPACE, True),  # cluster-scoped: no namespace
        (Target(kind="deployment"), DEPLOYMENT, False),  # exact, as the API spells it
    ],
)
def test_targets_match_like_selectors(
    target: Target, ref: tuple[str, str, str, str], matches: bool
) -> None:
    assert target.matches(ObjectRef(*ref)) is matches


def test_an_apply_leaves_out_the_ignored_paths_only_once_the_object_is_inventoried() -> None:
    replicas, image = parse_pointer("/spec/replicas"), parse_pointer("/spec/x")
    ignores = Ignores(
        (
            Rule(Target(group="apps"), (replicas,)),
            Rule(Target(kind="Deployment"), (replicas, image)),  # repeated paths once
        )
    )
    deployment, configmap = ObjectRef(*DEPLOYMENT), ObjectRef(*CONFIGMAP)
    assert ignores.paths_for(deployment) == (replicas, image)
    assert ignores.paths_for(configmap) == ()
    assert ignores.left_out(deployment, set()) == ()  # being created: sent whole
    # The inventory names objects whatever their version.
    inventory = {ObjectRef("apps/v1beta2", "Deployment", "web", "front").key}
    assert ignores.left_out(deployment, inventory) == (replicas, image)
    assert ignores.left_out(configmap, {configmap.key}) == ()


# --- bodies -------------------------------------------------------------------------

BODY: dict[str, Any] = {
    "apiVersion": "apps/v1",
    "kind": "Deployment",
    "metadata": {"name": "front", "annotations": {"a/b": "1", "keep": "2"}},
    "spec": {
        "replicas": 2,
        "template": {
            "spec": {
                "containers": [
                    {"name": "app", "image": "app:1", "resources": {"limits": {"cpu": "1"}}},
                    {"name": "side", "image": "side:1"},
                ]
            }
        },
    },
}


def _without(body: dict[str, Any], *where: tuple[Any, ...]) -> dict[str, Any]:
    expected = copy.deepcopy(body)
    for path in where:
        node = expected
        for key in path[:-1]:
            node = node[key]
        del node[path[-1]]
    return expected


CONTAINERS = ("spec", "template", "spec", "containers")


@pytest.mark.parametrize(
    ("paths", "expected"),
    [
        (["/spec/replicas"], _without(BODY, ("spec", "replicas"))),
        (["/metadata/annotations/a~1b"], _without(BODY, ("metadata", "annotations", "a/b"))),
        (
            ["/spec/template/spec/containers/1/image"],
            _without(BODY, (*CONTAINERS, 1, "image")),
        ),
        (
            ["/spec/template/spec/containers/0/resources/limits"],
            _without(BODY, (*CONTAINERS, 0, "resources", "limits")),
        ),
        # Absent paths, indexes past the end or not in RFC 6901 form, a list item
        # itself (positions would shift), a path through a scalar: nothing to remove.
        (["/spec/paused"], BODY),
        (["/spec/template/spec/containers/2/image"], BODY),
        (["/spec/template/spec/containers/01/image"], BODY),
        (["/spec/template/spec/containers/0"], BODY),
        (["/spec/replicas/x"], BODY),
        (["/spec/replicas", "/spec/replicas"], _without(BODY, ("spec", "replicas"))),
        (["/spec"], _without(BODY, ("spec",))),
    ],
)
def test_paths_are_left_out_of_a_copy_of_the_body(
    paths: list[str], expected: dict[str, Any]
) -> None:
    before = copy.deepcopy(BODY)
    assert leave_out(BODY, [parse_pointer(p) for p in paths]) == expected
    assert before == BODY


# --- fieldsV1 -----------------------------------------------------------------------

OWNED: dict[str, Any] = {
    "f:metadata": {"f:annotations": {"f:a/b": {}}, "f:labels": {"f:app": {}}},
    "f:spec": {
        "f:replicas": {},
        "f:template": {
            "f:spec": {
                "f:containers": {
                    'k:{"name":"app"}': {".": {}, "f:image": {}, "f:name": {}},
                    'k:{"name":"side"}': {".": {}, "f:image": {}, "f:name": {}},
                },
                "f:finalizers": {"v:x": {}},
                "f:args": {"i:0": {"f:v": {}}, "i:1": {"f:v": {}}},
            }
        },
    },
}
POD = ("f:spec", "f:template", "f:spec")
APP, SIDE = 'k:{"name":"app"}', 'k:{"name":"side"}'


@pytest.mark.parametrize(
    ("paths", "expected"),
    [
        (["/spec/replicas"], _without(OWNED, ("f:spec", "f:replicas"))),
        # A map left empty goes with what it held: an empty map would mean "owned whole".
        (["/metadata/annotations/a~1b"], _without(OWNED, ("f:metadata", "f:annotations"))),
        # A numeric segment matches every keyed item: their position is not in fieldsV1.
        (
            ["/spec/template/spec/containers/0/image"],
            _without(
                OWNED,
                (*POD, "f:containers", APP, "f:image"),
                (*POD, "f:containers", SIDE, "f:image"),
            ),
        ),
        # ... and the positional item of its own index only.
        (["/spec/template/spec/args/1/v"], _without(OWNED, (*POD, "f:args", "i:1"))),
        # A list item itself is never removed, as in the body.
        (["/spec/template/spec/containers/0"], OWNED),
        (["/spec/template/spec/args/0"], OWNED),
        (["/spec/paused", "/status/replicas"], OWNED),
        (["/spec"], _without(OWNED, ("f:spec",))),
    ],
)
def test_paths_are_stripped_from_the_owned_fields(
    paths: list[str], expected: dict[str, Any]
) -> None:
    before = copy.deepcopy(OWNED)
    assert strip_fields(OWNED, [parse_pointer(p) for p in paths]) == expected
    assert before == OWNED


def test_stripping_keeps_none_and_a_field_owned_whole() -> None:
    replicas = [parse_pointer("/spec/replicas")]
    assert strip_fields(None, replicas) is None
    # An atomic spec owned whole: nothing under it is named, nothing to remove.
    assert strip_fields({"f:spec": {}}, replicas) == {"f:spec": {}}
    assert strip_fields({"f:spec": {"f:replicas": {}}}, replicas) == {}


# --- properties ---------------------------------------------------------------------

KEYS = st.sampled_from(["a", "b", "c", "0", "1"])
TREES: st.SearchStrategy[Any] = st.recursive(
    st.integers(0, 3) | st.just("x"),
    lambda children: st.dictionaries(KEYS, children, max_size=4) | st.lists(children, max_size=3),
    max_leaves=20,
)
POINTERS = st.lists(
    st.lists(KEYS, min_size=1, max_size=4).map(lambda s: Pointer(tuple(s))), max_size=3
)


def _leaves(node: Any, at: tuple[str, ...] = ()) -> dict[tuple[str, ...], Any]:
    """Every scalar (and empty container) by its path."""
    if isinstance(node, dict) and node:
        return {k: v for key, child in node.items() for k, v in _leaves(child, (*at, key)).items()}
    if isinstance(node, list) and node:
        items = enumerate(node)
        return {k: v for i, child in items for k, v in _leaves(child, (*at, str(i))).items()}
    return {at: node}


def _under(path: tuple[str, ...], pointers: list[Pointer]) -> bool:
    return any(path[: len(p.segments)] == p.segments for p in pointers)


@given(st.dictionaries(KEYS, TREES, max_size=4), POINTERS)
def test_leaving_out_is_idempotent_and_touches_nothing_else(
    body: dict[str, Any], pointers: list[Pointer]
) -> None:
    once = leave_out(body, pointers)
    assert leave_out(once, pointers) == once
    before, after = _leaves(body), _leaves(once)
    for path, value in before.items():
        if not _under(path, pointers):
            assert after.get(path) == value
    # Nothing appears or moves: what is left was there, at the same path (a map
    # emptied by a removal is all that is new).
    for path, value in after.items():
        assert before.get(path) == value or value == {}


FIELD_KEYS = st.sampled_from(["f:a", "f:b", "f:0", "i:0", 'k:{"n":"x"}', "v:1", "."])
FIELDS: st.SearchStrategy[Any] = st.recursive(
    st.just({}), lambda children: st.dictionaries(FIELD_KEYS, children, max_size=3), max_leaves=15
)


def _owned(fields: dict[str, Any], at: tuple[str, ...] = ()) -> set[tuple[str, ...]]:
    """Every owned leaf by its fieldsV1 path."""
    if not fields:
        return {at}
    return {p for key, child in fields.items() for p in _owned(child, (*at, key))}


def _names(path: tuple[str, ...], pointer: Pointer) -> bool:
    """Whether the fieldsV1 ``path`` lies under ``pointer`` (see core/spec/ignore)."""
    if len(path) < len(pointer.segments):
        return False
    for n, (key, segment) in enumerate(zip(path, pointer.segments, strict=False)):
        last = n == len(pointer.segments) - 1
        item = key.startswith(("k:", "v:")) or key == f"i:{segment}"
        if key != f"f:{segment}" and (last or not segment.isdigit() or not item):
            return False
    return True


@given(st.dictionaries(FIELD_KEYS, FIELDS, min_size=1, max_size=4), POINTERS)
def test_stripping_fields_is_idempotent_and_touches_nothing_else(
    fields: dict[str, Any], pointers: list[Pointer]
) -> None:
    once = strip_fields(fields, pointers)
    assert strip_fields(once, pointers) == once
    kept = {p for p in _owned(fields) if not any(_names(p, q) for q in pointers)}
    assert (_owned(once) if once else set()) == kept
