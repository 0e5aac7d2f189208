"""Manifest limits: hostile YAML and JSON are refused before anything is expanded.

Covers each limit of crs_controller.core.manifests.limits at its boundary (nesting
depth, with and without aliases, documents per value, expanded nodes per value,
go-yaml's alias ratio, expanded characters per value), recursive aliases,
billion-laughs variants (sequences, mappings, merge keys, a long string aliased many
times), explicit tags PyYAML cannot convert, and property-based fuzzing: whatever
the input, parse_objects returns JSON-encodable objects or raises a ResourceError,
and no message ever quotes the input; for any shape of aliases, the characters
counted cover the value's JSON.
"""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from crs_controller.core.errors import InvalidManifest, ResourceError
from crs_controller.core.manifests import documents as manifests
from crs_controller.core.manifests import limits as manifest_limits
from crs_controller.core.manifests.documents import RESOURCE_SECRET_TYPE, apply_body, parse_objects
from crs_controller.core.manifests.limits import (
    MAX_CHARACTERS,
    MAX_DEPTH,
    MAX_DOCUMENTS,
    MAX_NODES,
    NODE_CHARACTERS,
    ValueBudget,
    allowed_alias_ratio,
)

HEADER = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n"
# Nodes of HEADER plus "spec:" (mapping, keys and values) and the document node,
# counted as go-yaml counts decodes.
HEADER_NODES = 12
MARKER = "5f3c9a0e7d21b4c8"  # stands for Secret data; 16 hex digits no message contains

DEEP = f"nested too deeply (deeper than {MAX_DEPTH} levels)"
DOCUMENTS = f"more than {MAX_DOCUMENTS} documents"
NODES = f"more than {MAX_NODES} nodes"
ALIASES = "too many aliases (go-yaml's rule)"
RECURSIVE = "recursive alias"
CHARACTERS = f"more than {MAX_CHARACTERS} characters (aliases expanded)"
LIMITS = (DEEP, DOCUMENTS, NODES, ALIASES, RECURSIVE, CHARACTERS)

FUZZ = settings(
    max_examples=200,
    deadline=None,
    derandomize=True,  # the same examples on every run: CI must not flake
    suppress_health_check=[HealthCheck.too_slow],
)
markers = st.binary(min_size=8, max_size=8).map(bytes.hex)


def configmap(value: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "addons", "namespace": "default"},
        "data": {"k": value},
    }


def secret(raw: bytes) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "creds", "namespace": "default"},
        "type": RESOURCE_SECRET_TYPE,
        "data": {"k": base64.b64encode(raw).decode()},
    }


def refusal(source: dict[str, Any]) -> InvalidManifest:
    """The InvalidManifest that parsing ``source`` raises, checked for leaks."""
    with pytest.raises(InvalidManifest) as info:
        parse_objects(source)
    assert_no_leak(info.value, MARKER)
    return info.value


def assert_no_leak(exc: BaseException, marker: str) -> None:
    chained: BaseException | None = exc
    while chained is not None:
        assert marker not in str(chained)
        assert marker not in repr(chained.args)
        chained = chained.__cause__ or chained.__context__


def expanded(value: Any) -> tuple[int, int]:
    """(nodes, depth) of a parsed value as if every shared object were copied.

    Independent of the module: it walks the constructed Python objects, not YAML
    nodes, iteratively and memoized per object id, so it returns at once even for a
    billion laughs (the counts are just big numbers) and fails on a cycle.
    """
    sizes: dict[int, tuple[int, int]] = {}
    stack: list[tuple[Any, bool]] = [(value, False)]
    on_path: set[int] = set()
    while stack:
        item, children_done = stack.pop()
        key = id(item)
        if not isinstance(item, dict | list) or (key in sizes and not children_done):
            continue
        children = [*item.keys(), *item.values()] if isinstance(item, dict) else item
        if not children_done:
            assert key not in on_path, "a cycle in a parse result"
            on_path.add(key)
            stack.append((item, True))
            stack.extend((child, False) for child in children)
            continue
        on_path.discard(key)
        below = [sizes.get(id(c), (1, 0)) for c in children]
        sizes[key] = (1 + sum(n for n, _ in below), 1 + max((d for _, d in below), default=0))
    return sizes.get(id(value), (1, 0))


# --- nesting depth --------------------------------------------------------------------


@pytest.mark.parametrize("anchor", ["", "&unused "], ids=["tree", "graph"])
@pytest.mark.parametrize(("levels", "ok"), [(MAX_DEPTH - 1, True), (MAX_DEPTH, False)])
def test_yaml_depth(anchor: str, levels: int, ok: bool) -> None:
    # The root mapping is a level, so `levels` lists under it make levels + 1; an
    # anchor (used or not) sends the document through the graph walk instead.
    value = HEADER + f"spec: {anchor}" + "[" * levels + MARKER + "]" * levels
    if ok:
        (obj,) = parse_objects(configmap(value))
        assert expanded(obj)[1] == MAX_DEPTH
    else:
        assert str(refusal(configmap(value))).endswith(f"key 'k', document 1: {DEEP}")


@pytest.mark.parametrize(("outer", "ok"), [(MAX_DEPTH - 130, True), (MAX_DEPTH - 129, False)])
def test_depth_counts_aliases_expanded(outer: int, ok: bool) -> None:
    # Each is shallow enough alone; an alias to the 128-level &a inside `outer`
    # lists under spec (root 1, spec 2) reaches 2 + outer + 128 levels.
    value = HEADER + "spec:\n  a: &a " + "[" * 128 + MARKER + "]" * 128
    value += "\n  b: " + "[" * outer + "*a" + "]" * outer + "\n"
    if ok:
        (obj,) = parse_objects(configmap(value))
        assert expanded(obj)[1] == MAX_DEPTH
    else:
        assert DEEP in str(refusal(configmap(value)))


@pytest.mark.parametrize(("levels", "ok"), [(MAX_DEPTH - 1, True), (MAX_DEPTH, False)])
def test_json_depth(levels: int, ok: bool) -> None:
    value = '{"apiVersion": "v1", "kind": "A", "metadata": {"name": "x"}, "spec": '
    value += "[" * levels + "]" * levels + "}"
    if ok:
        assert len(parse_objects(configmap(value))) == 1
    else:
        assert str(refusal(configmap(value))).endswith(f"key 'k', document 1: {DEEP}")


# --- documents ------------------------------------------------------------------------


@pytest.mark.parametrize(("documents", "ok"), [(MAX_DOCUMENTS, True), (MAX_DOCUMENTS + 1, False)])
def test_documents(documents: int, ok: bool) -> None:
    value = "---\n" + HEADER + "---\n" * (documents - 1)  # then empty documents
    if ok:
        assert len(parse_objects(configmap(value))) == 1
    else:
        message = str(refusal(configmap(value)))
        assert message.endswith(f"key 'k', document {MAX_DOCUMENTS + 1}: {DOCUMENTS}")


# --- nodes ----------------------------------------------------------------------------


def aliased_spec(pad: int, width: int, copies: int, item: str = MARKER) -> tuple[str, int, int]:
    """A document whose spec has ``pad`` plain scalars, then ``&a``, a list of
    ``width`` scalars ``item``, then a list of ``copies`` aliases to it; with
    go-yaml's counts: (text, nodes decoded, nodes decoded through aliases)."""
    text = HEADER + "spec:\n"
    text += f"  pad: [{', '.join(['0'] * pad)}]\n"
    text += f"  a: &a [{', '.join([item] * width)}]\n"
    text += f"  b: [{', '.join(['*a'] * copies)}]\n"
    # each key and its list, the scalars, and each alias node plus its a's copy
    nodes = HEADER_NODES + 3 * 2 + pad + width + copies * (1 + 1 + width)
    return text, nodes, copies * (1 + width)


@pytest.mark.parametrize(("extra", "ok"), [(0, True), (1, False)])
def test_nodes_with_aliases_expanded(extra: int, ok: bool) -> None:
    # Past 400,000 decodes go-yaml lets fewer come from aliases: 96.5% at 500,000.
    # One-character scalars, so that the character limit does not decide.
    text, nodes, aliased = aliased_spec(pad=28_513 + extra, width=999, copies=470, item="m")
    assert nodes == MAX_NODES + extra
    assert aliased / nodes < allowed_alias_ratio(nodes), "the alias rule must not decide"
    if ok:
        (obj,) = parse_objects(configmap(text))
        # What a JSON encoder would walk: neither the document nor the alias nodes.
        assert expanded(obj)[0] == nodes - 1 - 470
    else:
        assert NODES in str(refusal(configmap(text)))


def test_nodes_are_counted_per_value_across_documents() -> None:
    text, nodes, _aliased = aliased_spec(pad=8_693, width=999, copies=290, item="m")
    assert nodes == 300_000
    assert len(parse_objects(configmap(text))) == 1
    message = str(refusal(configmap(f"{text}---\n{text}")))
    assert message.endswith(f"key 'k', document 2: {NODES} (aliases expanded)")


@pytest.mark.parametrize(("extra", "ok"), [(0, True), (1, False)])
def test_json_nodes(extra: int, ok: bool) -> None:
    items = MAX_NODES - HEADER_NODES + extra
    value = json.dumps({"apiVersion": "v1", "kind": "A", "metadata": {"name": "x"}, "spec": []})
    value = value[:-2] + ",".join(["0"] * items) + "]}"
    if ok:
        assert len(parse_objects(configmap(value))) == 1
    else:
        assert str(refusal(configmap(value))).endswith(f"document 1: {NODES} (aliases expanded)")


def test_json_with_millions_of_nodes() -> None:
    assert NODES in str(refusal(configmap("[" + "0," * 2_000_000 + "0]")))


@pytest.mark.parametrize(("items", "ok"), [(1000, True), (1001, False)])
def test_plain_yaml_nodes(monkeypatch: pytest.MonkeyPatch, items: int, ok: bool) -> None:
    # Without anchors a document is walked as a tree; the limit is lowered to stay quick.
    monkeypatch.setattr(manifest_limits, "MAX_NODES", HEADER_NODES + 1000)
    value = HEADER + f"spec: [{', '.join([MARKER] * items)}]"
    if ok:
        assert len(parse_objects(configmap(value))) == 1
    else:
        assert "document 1: more than" in str(refusal(configmap(value)))


# --- go-yaml's alias rule -------------------------------------------------------------


def test_allowed_alias_ratio_is_go_yamls() -> None:
    assert allowed_alias_ratio(1_000) == allowed_alias_ratio(400_000) == 0.99
    assert allowed_alias_ratio(2_200_000) == pytest.approx(0.545)
    assert allowed_alias_ratio(4_000_000) == allowed_alias_ratio(10**9) == 0.10


@pytest.mark.parametrize(("copies", "ok"), [(212, True), (213, False)])
def test_alias_ratio(copies: int, ok: bool) -> None:
    text, nodes, aliased = aliased_spec(pad=0, width=199, copies=copies)
    assert (aliased / nodes <= 0.99) is ok, "the boundary: 99% of the decodes through aliases"
    if ok:
        (obj,) = parse_objects(configmap(text))
        assert expanded(obj)[0] == nodes - 1 - copies
    else:
        assert str(refusal(configmap(text))).endswith(f"key 'k', document 1: {ALIASES}")


def test_documents_mostly_of_aliases_parse_within_the_ratio() -> None:
    (obj,) = parse_objects(configmap(sequence_bomb(levels=3)))  # 9 x 9 x 9 scalars
    # go-yaml decodes 1035 nodes, 990 of them through aliases: 95.7%, under its 99%.
    # The objects are those nodes but the document and the 99 alias nodes.
    assert expanded(obj)[0] == 1035 - 1 - 99


# --- billion laughs and recursion ----------------------------------------------------


def sequence_bomb(levels: int, width: int = 9) -> str:
    lines = [HEADER + "spec:", f"  l0: &l0 [{', '.join([MARKER] * width)}]"]
    for i in range(1, levels):
        lines.append(f"  l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * width)}]")
    return "\n".join(lines) + "\n"


def mapping_bomb(levels: int, width: int = 9) -> str:
    lines = [
        HEADER + "spec:",
        f"  l0: &l0 {{{', '.join(f'k{j}: {MARKER}' for j in range(width))}}}",
    ]
    for i in range(1, levels):
        pairs = ", ".join(f"k{j}: *l{i - 1}" for j in range(width))
        lines.append(f"  l{i}: &l{i} {{{pairs}}}")
    return "\n".join(lines) + "\n"


def merge_bomb(levels: int, width: int = 9) -> str:
    # PyYAML's merge would copy width**levels key/value pairs while constructing.
    lines = [
        HEADER + "spec:",
        f"  l0: &l0 {{{', '.join(f'k{j}: {MARKER}' for j in range(width))}}}",
    ]
    for i in range(1, levels):
        lines.append(f"  l{i}: &l{i} {{<<: [{', '.join([f'*l{i - 1}'] * width)}], x{i}: 1}}")
    return "\n".join(lines) + "\n"


# Seven levels of nine: 4.8 million nodes expanded, seconds and gigabytes if they
# ever got through, yet not so many that a regression would hang CI.
@pytest.mark.parametrize("bomb", [sequence_bomb, mapping_bomb, merge_bomb])
@pytest.mark.parametrize("levels", [4, 7])
def test_billion_laughs_is_refused(bomb: Any, levels: int) -> None:
    message = str(refusal(configmap(bomb(levels))))
    assert message.endswith(f"key 'k', document 1: {ALIASES}")


def test_billion_laughs_diluted_below_the_ratio_hits_the_node_limit() -> None:
    # 30,000 plain nodes keep aliases under 96.5% of the first 500,000 decodes.
    padding = HEADER + "pad: [" + ", ".join(["0"] * 30_000) + "]\n"
    bomb = sequence_bomb(levels=7).replace(HEADER, padding)
    assert NODES in str(refusal(configmap(bomb)))


def test_billion_laughs_in_a_secret() -> None:
    source = secret(sequence_bomb(levels=7).encode())
    assert str(refusal(source)).startswith("Secret default/creds: key 'k', document 1:")


@pytest.mark.parametrize(
    "spec",
    [
        "&a [*a]",
        "&a {x: *a}",
        "&a [[[{x: [*a]}]]]",
        "&a {<<: *a}",
        "&a {? *a : 1}",
        "&a [&b [*a]]",
    ],
)
def test_recursive_alias(spec: str) -> None:
    message = str(refusal(configmap(HEADER + f"spec: {spec}\n")))
    assert message.endswith(
        "key 'k', document 1: recursive alias (an anchor used inside its own value)"
    )


def test_refusals_chain_nothing() -> None:
    for value in (sequence_bomb(7), HEADER + "spec: &a [*a]", "[" * 5_000 + "]" * 5_000):
        error = refusal(configmap(value))
        assert error.__cause__ is None and error.__context__ is None


def test_aliases_within_limits_are_shared_not_copied() -> None:
    (obj,) = parse_objects(configmap(sequence_bomb(levels=3)))
    assert obj["spec"]["l2"][0] is obj["spec"]["l1"]
    json.dumps(apply_body(obj))


# --- characters, aliases expanded -------------------------------------------------------


@pytest.mark.parametrize(("extra", "ok"), [(0, True), (1, False)])
def test_characters_with_aliases_expanded(extra: int, ok: bool) -> None:
    # spec: {a: &a <long>, b: [*a, *a, *a, *a]}: the header's scalars, spec, a and b
    # are 44 characters, the long string is written five times, and each of the
    # 16 + 2 x 4 decodes adds NODE_CHARACTERS.
    length = (MAX_CHARACTERS - 44 - NODE_CHARACTERS * 24) // 5 + extra
    assert (44 + 5 * length + NODE_CHARACTERS * 24 <= MAX_CHARACTERS) is ok
    long = MARKER + "m" * (length - len(MARKER))
    text = HEADER + f"spec:\n  a: &a {long}\n  b: [*a, *a, *a, *a]\n"
    if ok:
        (obj,) = parse_objects(configmap(text))
        assert obj["spec"]["b"][3] == long
    else:
        assert str(refusal(configmap(text))).endswith(f"key 'k', document 1: {CHARACTERS}")


# 130,000 aliases to one 600,000-character string: 130,016 nodes, well within the node
# limit and go-yaml's rule, yet 78 billion characters once anything writes it out.
LONG_STRING_BOMB = f"""
import resource
resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))
from crs_controller.core.manifests.documents import parse_objects
from crs_controller.core.manifests.hashing import object_hash
text = (
    {HEADER!r}
    + "spec:\\n  a: &a " + {MARKER!r} + "x" * 600_000
    + "\\n  list: [" + ",".join(["*a"] * 130_000) + "]\\n"
)
source = {{"kind": "ConfigMap", "metadata": {{"name": "addons", "namespace": "default"}}}}
try:
    objects = parse_objects({{**source, "data": {{"k": text}}}})
    print("accepted", [object_hash(o) for o in objects])
except Exception as exc:
    print(type(exc).__name__, exc)
"""


def test_a_long_string_aliased_many_times_is_refused_within_a_memory_limit() -> None:
    """Refused while parsing, in a process allowed 1 GiB: accepted, its content hash
    alone would need ~72 GiB."""
    done = subprocess.run(
        [sys.executable, "-c", LONG_STRING_BOMB],
        capture_output=True,
        timeout=120,
        check=False,
    )
    out = done.stdout.decode()
    expected = f"InvalidManifest ConfigMap default/addons: key 'k', document 1: {CHARACTERS}\n"
    assert out == expected, (out, done.stderr.decode()[-500:])


def test_small_anchors_reused_parse() -> None:
    items = [
        f"- {{apiVersion: apps/v1, kind: Deployment, metadata: {{name: d{i}, labels: *labels}},"
        " spec: {template: {metadata: {labels: *labels}, spec: *pod}}}"
        for i in range(200)
    ]
    text = (
        "apiVersion: v1\nkind: List\nshared:\n"
        "  labels: &labels {app.kubernetes.io/name: addon, app.kubernetes.io/part-of: fleet}\n"
        "  pod: &pod {containers: [{name: c, image: registry.example/addon:v1.2.3}]}\n"
        "items:\n" + "\n".join(items) + "\n"
    )
    objects = parse_objects(configmap(text))
    assert len(objects) == 200
    assert objects[199]["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/name"] == (
        "addon"
    )


# Scalars whose JSON spelling may be longer than their YAML one (null, false, quotes),
# besides plain ones; none that JSON escapes.
_SCALARS = ["x", "abc", "'a b'", '"q"', "''", "~", "null", "no", "on", "0", "-12", "1_000"]
_SCALARS += ["0x1f", "0o17", "-1.5", ".5", "'{m}'", "{}", "[]"]


def _shape_item(code: int, level: int) -> str:
    alias = f"*l{code // 7 % level}"
    scalar = _SCALARS[code % len(_SCALARS)]
    return [alias, scalar, f"[{alias}, {scalar}]", f"{{y: {alias}, z: {scalar}}}"][code % 4]


def alias_shape(levels: list[tuple[bool, list[int]]]) -> str:
    """A document of anchors &l0, &l1, … each a list or mapping of scalars and of
    aliases to earlier anchors, then a list of aliases to all of them."""
    lines = [HEADER + "spec:", "  l0: &l0 {a: '{m}', b: x, c: ~}"]
    for level, (is_list, codes) in enumerate(levels, start=1):
        items = [_shape_item(code, level) for code in codes]
        pairs = [f"k{i}: {item}" for i, item in enumerate(items)]
        body = f"[{', '.join(items)}]" if is_list else "{" + ", ".join(pairs) + "}"
        lines.append(f"  l{level}: &l{level} {body}")
    lines.append(f"  all: [{', '.join(f'*l{i}' for i in range(len(levels) + 1))}]")
    return "\n".join(lines) + "\n"


def estimated_and_loaded(text: str) -> tuple[int, Any]:
    """A document's characters as the value budget counts them, and its value."""
    loader = manifests._Loader(text)
    try:
        anchors = loader.anchors
        node = loader.get_single_node()
        budget = ValueBudget()
        assert budget.yaml_document(node, anchored=bool(anchors)) is None
        return budget.characters, loader.construct_document(node)
    finally:
        loader.dispose()


@FUZZ
@given(
    levels=st.lists(
        st.tuples(st.booleans(), st.lists(st.integers(0, 999), min_size=1, max_size=6)),
        min_size=1,
        max_size=5,
    ),
    marker=markers,
)
def test_the_character_count_covers_the_json_of_any_alias_shape(
    levels: list[tuple[bool, list[int]]], marker: str
) -> None:
    text = alias_shape(levels).replace("{m}", marker)
    estimate, value = estimated_and_loaded(text)
    spelled = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    assert len(spelled) <= estimate
    # The same value written out, without anchors: a tree, counted level by level.
    tree_estimate, tree = estimated_and_loaded(json.dumps(value, ensure_ascii=False))
    assert tree == value
    assert len(spelled) <= tree_estimate


# --- tags PyYAML cannot convert, found by fuzzing ------------------------------------


@pytest.mark.parametrize(
    "value",
    [
        f"!!int {MARKER}x",
        "!!int '-'",
        "!!int 0b",
        "!!float ''",
        f"!!float {MARKER}x",
        f"!!bool {MARKER}",
        "!!int " + "1" * 5_000,
        "!!int 0x" + "f" * 5_000,
    ],
)
def test_unconvertible_scalars(value: str) -> None:
    message = str(refusal(configmap(HEADER + f"spec: {value}\n")))
    assert "document 1: invalid YAML at line 4, column 7: the value cannot be read as" in message


@pytest.mark.parametrize("value", ["1" * 5_000, "0x" + "f" * 5_000])
def test_numbers_past_64_bits_and_a_double_stay_strings(value: str) -> None:
    # go-yaml cannot read them as numbers either: kubectl sends the text.
    (obj,) = parse_objects(configmap(HEADER + f"spec: {value}\n"))
    assert obj["spec"] == value


def test_sets_and_ordered_maps_become_json_types() -> None:
    text = HEADER + "spec: {s: !!set {a, b}, o: !!omap [{a: 1}, {b: 2}], p: !!pairs [{a: 1}]}\n"
    (obj,) = parse_objects(configmap(text))
    assert obj["spec"] == {"s": {"a": None, "b": None}, "o": [{"a": 1}, {"b": 2}], "p": [{"a": 1}]}


# --- fuzzing --------------------------------------------------------------------------

# Fragments that steer random text towards YAML's corners: anchors, aliases, merge
# keys, tags, flow and block collections, documents, directives, quoting. "{m}" is
# replaced by the marker.
_TOKENS = [
    *("a", "b", "{m}", "0", "1.5", "-", ":", ",", " ", "  ", "\n", "\t", "'", '"', "#"),
    *("- ", ": ", "[", "]", "{", "}", "? ", "|\n", ">\n", "---\n", "...\n", "%YAML 1.1\n"),
    *("&a ", "&b ", "*a", "*b", "&{m} ", "*{m}", "<<: ", "<<: *a", "<<: [*a, *b]"),
    *("!!int ", "!!float ", "!!bool ", "!!set ", "!!omap ", "!!binary ", "!!str ", "!{m} "),
    *("!!timestamp ", "!!null ", "!!python/tuple ", "!!merge ", "\\x", "\\u", "0x", "0o"),
    *("apiVersion: v1\n", "kind: A\n", "kind: List\nitems:\n", "metadata: {name: n}\n"),
]
yamlish = st.lists(st.sampled_from(_TOKENS), max_size=60).map("".join)


def check_outcome(source: dict[str, Any], marker: str) -> None:
    """Objects that survive JSON encoding, or a ResourceError that quotes nothing."""
    try:
        objects = parse_objects(source)
    except ResourceError as exc:
        assert_no_leak(exc, marker)
        return
    assert all(isinstance(obj, dict) for obj in objects)
    for obj in objects:
        nodes, depth = expanded(obj)
        assert nodes <= MAX_NODES and depth <= MAX_DEPTH
        json.dumps(apply_body(obj))


@FUZZ
@given(
    text=st.one_of(st.text(), yamlish),
    marker=markers,
    where=st.sampled_from(["prefix", "suffix", "both", "tokens"]),
    as_secret=st.booleans(),
)
def test_any_text_parses_or_is_refused(text: str, marker: str, where: str, as_secret: bool) -> None:
    value = text.replace("{m}", marker)
    value = marker + value if where in ("prefix", "both") else value
    value = value + marker if where in ("suffix", "both") else value
    source = secret(value.encode()) if as_secret else configmap(value)
    check_outcome(source, marker)


@FUZZ
@given(raw=st.binary(max_size=200), marker=markers, at=st.integers(min_value=0, max_value=200))
def test_any_bytes_parse_or_are_refused(raw: bytes, marker: str, at: int) -> None:
    check_outcome(secret(raw[:at] + marker.encode() + raw[at:]), marker)


_LEVEL = st.tuples(
    st.sampled_from(["list", "map", "merge"]),
    st.lists(st.integers(min_value=0, max_value=99), min_size=1, max_size=12),
    st.integers(min_value=0, max_value=15),  # 7: the level holds a recursive alias
)


def _item(code: int, anchor: str) -> str:
    # Mostly aliases, so that expansions multiply from level to level.
    return [f"*{anchor}", f"[*{anchor}, {{y: *{anchor}}}]", f"*{anchor}", "'{m}'"][code % 4]


def anchor_graph(levels: list[tuple[str, list[int], int]]) -> str:
    """A document of nested anchors and aliases: &l0 holds scalars, each later &lN
    a list or mapping of aliases to earlier anchors and scalars, maybe merging
    earlier mappings, rarely with an alias to itself. Each code in the level's list
    picks one item."""
    lines = [HEADER + "spec:", "  l0: &l0 {a: '{m}', b: x}"]
    mappings = [0]  # the anchors that a merge key may take
    for level, (style, codes, recursive) in enumerate(levels, start=1):
        items = [_item(code, f"l{code // 4 % level}") for code in codes]
        if recursive == 7:  # not 0 nor 15, which hypothesis favours
            items.append(f"*l{level}")
        if style == "list":
            body = f"[{', '.join(items)}]"
        else:
            pairs = [f"k{i}: {item}" for i, item in enumerate(items)]
            if style == "merge":
                merged = ", ".join(f"*l{mappings[code % len(mappings)]}" for code in codes)
                pairs.insert(0, f"<<: [{merged}]")
            body = "{" + ", ".join(pairs) + "}"
            mappings.append(level)
        lines.append(f"  l{level}: &l{level} {body}")
    return "\n".join(lines) + "\n"


anchor_graphs = st.lists(_LEVEL, min_size=1, max_size=8).map(anchor_graph)


@FUZZ
@given(document=anchor_graphs, marker=markers)
def test_anchor_graphs_are_bounded_or_refused(document: str, marker: str) -> None:
    source = configmap(document.replace("{m}", marker))
    try:
        (obj,) = parse_objects(source)
    except InvalidManifest as exc:
        assert_no_leak(exc, marker)
        assert any(limit in str(exc) for limit in LIMITS)
        return
    nodes, depth = expanded(obj)  # independent of the module's own count
    assert nodes <= MAX_NODES and depth <= MAX_DEPTH
    json.dumps(apply_body(obj))


@pytest.mark.parametrize("value", [".nan", ".inf", "-.Inf", "!!float .NaN"])
def test_numbers_without_a_json_form_are_refused_naming_the_position(value: str) -> None:
    doc = f"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\nspec:\n  f: {value}\n"
    with pytest.raises(InvalidManifest, match="cannot be read as a finite number") as caught:
        parse_objects(configmap(doc))
    assert "line 6" in str(caught.value)


def test_json_nan_is_not_a_number_either() -> None:
    doc = '{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}, "v": NaN}'
    [obj] = parse_objects(configmap(doc))
    assert json.dumps(obj, allow_nan=False)  # encodable: NaN was read as YAML's text


# --- distinct nodes, counted while composed ------------------------------------------

COMPOSED = "distinct nodes"
# compose_node runs for every node but the document: HEADER's, "spec:" and its value.
HEADER_COMPOSED = HEADER_NODES - 1


@pytest.mark.parametrize(
    ("documents", "items", "ok"),
    [(1, 1000, True), (1, 1001, False), (2, 494, True), (2, 495, False)],
    # Two documents: 2 x (11 + 494) = 1010 fits in 1011; 2 x (11 + 495) does not.
    ids=["at-the-limit", "one-over", "two-documents-fit", "two-documents-over"],
)
def test_distinct_nodes_are_counted_per_value_while_composed(
    monkeypatch: pytest.MonkeyPatch, documents: int, items: int, ok: bool
) -> None:
    """The node graph is refused while it is built, before it is whole: its peak,
    ~340 bytes a node, is what a hostile value would spend."""
    monkeypatch.setattr(manifests, "MAX_COMPOSED_NODES", HEADER_COMPOSED + 1000)
    document = HEADER + f"spec: [{', '.join([MARKER] * items)}]\n"
    value = "---\n".join([document] * documents)
    if ok:
        assert len(parse_objects(configmap(value))) == documents
    else:
        message = str(refusal(configmap(value)))
        assert message.endswith(f"document {documents}: more than 200000 {COMPOSED}")
        assert MARKER not in message


@given(items=st.integers(0, 300), mappings=st.booleans())
@FUZZ
def test_the_composed_limit_holds_for_any_count(items: int, mappings: bool) -> None:
    # A flow of empty mappings ("{}": one node each) or of one-key mappings (three).
    item, nodes = ("{a: b}", 3) if mappings else ("{}", 1)
    value = HEADER + f"spec: [{', '.join([item] * items)}]\n"
    try:
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(manifests, "MAX_COMPOSED_NODES", HEADER_COMPOSED + 200)
            parse_objects(configmap(value))
    except InvalidManifest as exc:
        assert COMPOSED in str(exc)
        assert items * nodes > 200
    else:
        assert items * nodes <= 200


def test_a_1_mib_flow_of_empty_mappings_is_refused_while_composed() -> None:
    value = HEADER + "spec: [" + ",".join(["{}"] * 349_000) + "]\n"
    assert str(refusal(configmap(value))).endswith(f"more than 200000 {COMPOSED}")
