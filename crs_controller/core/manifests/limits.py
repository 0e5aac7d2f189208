"""Limits on what one resource value may expand to, checked before anything is built.

YAML aliases make a few kilobytes stand for gigabytes: PyYAML builds an aliased
node once and shares it, so parsing a "billion laughs" is instant, and the blow-up
comes later, in whatever walks the result (JSON encoding of the apply body, deep
copies). So the limits are checked on the composed node graph of each document,
before construction, counting every alias as the copy it stands for; memoizing
per node keeps that O(unique nodes) however far the aliases would expand. A
document without anchors, as real add-ons are, is a tree and takes a cheaper walk.

Nodes are counted the way go-yaml (kubectl's parser) counts decodes: the document,
every scalar, sequence and mapping (keys included), and every alias as one node plus
everything under its anchor. Merge keys (``<<: *a``) are aliases like any other.
Characters are counted alongside: a scalar's own, an alias all of its anchor's
(remembered per anchor like its nodes), since one alias to a long string is one
node however long the string. JSON values get the same depth and node limits; they
have no aliases.

Messages name the limit, never the content: values may be Secret data.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from itertools import chain, compress
from operator import attrgetter
from typing import Any

from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

__all__ = [
    "MAX_CHARACTERS",
    "MAX_COMPOSED_NODES",
    "MAX_DEPTH",
    "MAX_DOCUMENTS",
    "MAX_NODES",
    "NODE_BYTES",
    "NODE_CHARACTERS",
    "TOO_DEEP",
    "TOO_MANY_COMPOSED",
    "ValueBudget",
    "allowed_alias_ratio",
    "count_nodes",
    "json_size",
]

# Nesting depth: sequences and mappings from the document's root down, aliases
# expanded. Real add-ons need 24 (Calico's CRD schemas, the deepest here); a CRD
# with 100 nested object properties (two levels each) still parses. Deeper would
# crowd Python's 1000-frame recursion limit, since PyYAML's composer and the
# copy.deepcopy of an apply body spend two frames a level.
MAX_DEPTH = 256

# Documents in one value. Calico has 38; a 1 MiB value of bare "---" separators
# would be 262,144 documents, each costing the parser its own overhead (~2 s).
MAX_DOCUMENTS = 10_000

# Nodes in one value, all documents together, aliases expanded. Calico's 710 KB
# holds 16,470; 1 MiB (a ConfigMap's limit) of the densest plain YAML or JSON,
# "[0,0,…]", about 520,000, so in practice only aliases reach this. Expanded,
# 500,000 short strings are 3.5 MB of JSON (more than the API server's 3 MiB request
# limit) and 30 MB of Python objects: bounded, unlike a billion laughs.
MAX_NODES = 500_000

# Characters in one value, all documents together, as JSON spells it with every alias
# written out (the content hash of each object, the apply body, a diff): each scalar's
# characters, an alias all of its anchor's, and NODE_CHARACTERS a node for JSON's
# punctuation (quotes, a comma or colon) and the longer spelling of null and false
# (an estimate: a character JSON escapes is spelled in up to six).
# Nodes alone do not bound it: 130,000 aliases to one 600,000-character string are
# 130,016 nodes and 78 billion characters. Without aliases, a value the API server
# accepts (1 MiB) stays under 3 MiB whatever its shape (1 MiB of scalars, or 500,000
# nodes of a character each); one object over the API server's 3 MiB request limit
# could not be applied anyway.
MAX_CHARACTERS = 4 * 1024 * 1024
NODE_CHARACTERS = 5

# Loaded JSON or YAML values in memory, measured (tracemalloc) per node: 1 MiB of
# "[{},{},…]" holds 24 MiB (69 B a node), 1 MiB of small ConfigMaps 9.2 MiB (77 B a
# node). An estimate of what a loaded value holds: its characters and this a node.
NODE_BYTES = 80

# Distinct YAML nodes in one value, all documents together, counted while they are
# composed: the node graph of a document is built whole before the limits above are
# checked on it, at ~340 bytes a node (the node, its marks), and that peak, not what
# is kept, is what a hostile value spends: 1 MiB of "[{},{},…]" is 349,000 nodes,
# 113 MiB composed and 230 MiB at its peak. Calico's 710 KB is 16,470 nodes, a
# 1 MiB CRD bundle about 30,000; 200,000 keeps a parse's peak near 80 MiB.
MAX_COMPOSED_NODES = 200_000

# go-yaml v3's rule (decode.go, allowedAliasRatio): once a document has decoded more
# than 1000 nodes of which more than 100 came from aliases, the share that came from
# aliases may be at most 99%, falling to 10% between 400,000 and 4,000,000 decodes.
_ALIAS_RULE_MIN_ALIASED = 100
_ALIAS_RULE_MIN_DECODED = 1000
_ALIAS_RATIO_RANGE_LOW = 400_000
_ALIAS_RATIO_RANGE_HIGH = 4_000_000

TOO_DEEP = f"nested too deeply (deeper than {MAX_DEPTH} levels)"
TOO_MANY_COMPOSED = f"more than {MAX_COMPOSED_NODES} distinct nodes"
_TOO_MANY_DOCUMENTS = f"more than {MAX_DOCUMENTS} documents"
_TOO_MANY_NODES = f"more than {MAX_NODES} nodes (aliases expanded)"
_TOO_MANY_CHARACTERS = f"more than {MAX_CHARACTERS} characters (aliases expanded)"
_TOO_ALIASED = "too many aliases (go-yaml's rule)"
_RECURSIVE = "recursive alias (an anchor used inside its own value)"


def allowed_alias_ratio(decoded: int) -> float:
    """go-yaml's allowedAliasRatio: the share of decodes that may come from aliases."""
    if decoded <= _ALIAS_RATIO_RANGE_LOW:
        return 0.99
    if decoded >= _ALIAS_RATIO_RANGE_HIGH:
        return 0.10
    span = _ALIAS_RATIO_RANGE_HIGH - _ALIAS_RATIO_RANGE_LOW
    return 0.99 - 0.89 * (decoded - _ALIAS_RATIO_RANGE_LOW) / span


def _too_aliased(aliased: int, decoded: int) -> bool:
    return (
        aliased > _ALIAS_RULE_MIN_ALIASED
        and decoded > _ALIAS_RULE_MIN_DECODED
        and aliased / decoded > allowed_alias_ratio(decoded)
    )


class ValueBudget:
    """The limits of one resource value, spent document by document.

    Each method returns what is wrong (a message naming the limit) or None.
    """

    def __init__(self) -> None:
        self.documents = 0
        self.nodes = 0
        self.characters = 0  # as JSON would spell the value: see MAX_CHARACTERS

    def next_document(self) -> str | None:
        """Call before composing a document, so the one too many is never parsed."""
        self.documents += 1
        return _TOO_MANY_DOCUMENTS if self.documents > MAX_DOCUMENTS else None

    def yaml_document(self, root: Node | None, anchored: bool) -> str | None:
        """Check one composed YAML document, before it is constructed.

        ``anchored``: whether the document defines any anchor. Without one it can hold
        no alias, so its nodes form a tree, and a walk half as costly does.
        """
        return self._spend(_count_yaml_graph if anchored else _count_yaml_tree, root)

    def json_document(self, value: Any) -> str | None:
        """Check a loaded JSON value (always one whole document)."""
        return self.next_document() or self._spend(_count_json, value)

    def _spend(self, count: Callable[[Any, int], tuple[int, int]], document: Any) -> str | None:
        room = MAX_NODES - self.nodes
        try:
            nodes, characters = count(document, room)
        except _Refused as refused:
            return refused.problem
        if nodes > room:
            return _TOO_MANY_NODES
        self.nodes += nodes
        self.characters += characters + NODE_CHARACTERS * nodes
        return _TOO_MANY_CHARACTERS if self.characters > MAX_CHARACTERS else None


class _Refused(Exception):
    """A limit is exceeded; caught in ValueBudget, never seen outside this module."""

    def __init__(self, problem: str) -> None:
        super().__init__(problem)
        self.problem = problem


# --- trees: level by level ---------------------------------------------------------
#
# A real add-on is thousands of small nodes, and walking them one by one in Python
# would cost a noticeable share of the parse. Level by level, most of the per-node
# work (gathering children, keeping the sequences and mappings among them) is done
# by C built-ins: about 5% of the time parsing Calico takes, the graph walk below 10%.

# Exact types, for speed: PyYAML's composer makes no other node classes.
_VALUE = attrgetter("value")
_IS_YAML_CONTAINER = frozenset({MappingNode, SequenceNode}).__contains__
_IS_DICT = frozenset({dict}).__contains__
_IS_LIST = frozenset({list}).__contains__
_IS_JSON_CONTAINER = frozenset({dict, list}).__contains__


def _count_levels(
    root: Any,
    children: Callable[[list[Any]], tuple[int, int, list[Any]]],
    is_container: Callable[[type], bool],
    room: int,
) -> tuple[int, int]:
    """Nodes of a tree, the document node included, and the characters of its
    scalars; raises _Refused past a limit.

    ``children`` gives, for a level of containers, how many nodes are one level
    below, their characters, and those of them that may be containers. Were the
    tree a graph after all, this would still stop: past MAX_DEPTH levels or
    ``room`` nodes.
    """
    # The document node and the root: a lone scalar's characters are not counted, as
    # it is refused after all (no object).
    decoded, characters = 2, 0
    level = [root] if is_container(type(root)) else []
    depth = 0
    while level:
        depth += 1
        if depth > MAX_DEPTH:
            raise _Refused(TOO_DEEP)
        count, spelled, below = children(level)
        decoded += count
        characters += spelled
        if decoded > room:
            raise _Refused(_TOO_MANY_NODES)
        level = list(compress(below, map(is_container, map(type, below))))
    return decoded, characters


def _yaml_children(level: list[Any]) -> tuple[int, int, list[Any]]:
    below: list[Any] = []
    for node in level:  # a mapping's value is [(key, value), ...]: keys are nodes too
        below.extend(
            chain.from_iterable(node.value) if isinstance(node, MappingNode) else node.value
        )
    # A scalar's value is its text; a container's, its items: counted too, a few more.
    return len(below), sum(map(len, map(_VALUE, below))), below


def _json_children(level: list[Any]) -> tuple[int, int, list[Any]]:
    kinds = list(map(type, level))
    dicts = list(compress(level, map(_IS_DICT, kinds)))
    lists: Iterable[list[Any]] = compress(level, map(_IS_LIST, kinds))
    below = [*chain.from_iterable(map(dict.values, dicts)), *chain.from_iterable(lists)]
    keys = sum(map(len, dicts))  # nodes as in YAML, though never containers
    # Characters are not counted: without aliases, JSON is no longer than its text.
    return keys + len(below), 0, below


def _count_yaml_tree(root: Node | None, room: int) -> tuple[int, int]:
    return _count_levels(root, _yaml_children, _IS_YAML_CONTAINER, room)


def _count_json(value: Any, room: int) -> tuple[int, int]:
    return _count_levels(value, _json_children, _IS_JSON_CONTAINER, room)


def count_nodes(values: Iterable[Any]) -> int:
    """The nodes of loaded values (each counted as a document), for an estimate of the
    memory they hold: a level walk done by C built-ins, a few percent of the parse.
    Stops counting past MAX_DEPTH levels, which a value within the limits never has."""
    total = 0
    for value in values:
        try:
            total += _count_json(value, MAX_NODES * 8)[0]
        except _Refused:
            total += MAX_NODES
    return total


def json_size(value: Any, *, max_nodes: int, max_depth: int) -> tuple[int, int]:
    """The nodes of a loaded JSON value (itself, and every key and value under it) and
    its depth (lists and dicts nested, 0 for a scalar), counted level by level. Stops
    once past either limit: a count over its limit says only that it is over it."""
    nodes, depth = 1, 0
    level = [value] if _IS_JSON_CONTAINER(type(value)) else []
    while level:
        depth += 1
        count, _, below = _json_children(level)
        nodes += count
        if nodes > max_nodes or depth > max_depth:
            break
        level = list(compress(below, map(_IS_JSON_CONTAINER, map(type, below))))
    return nodes, depth


# --- graphs: depth first, in document order ----------------------------------------


class _Frame:
    """A sequence or mapping being walked: its children and what it has counted."""

    __slots__ = ("characters", "children", "height", "key", "start")

    def __init__(self, node: Node, start: int, characters: int) -> None:
        self.key = id(node)
        self.children = (
            chain.from_iterable(node.value) if isinstance(node, MappingNode) else iter(node.value)
        )
        self.start = start  # the decode count before this node
        self.characters = characters  # the character count before this node
        self.height = 0  # of its tallest child: sequences and mappings below it


# id(node) -> what the node expands to: (nodes, height, characters)
_Finished = dict[int, tuple[int, int, int]]


def _count_yaml_graph(root: Node | None, room: int) -> tuple[int, int]:
    """go-yaml's decode count of one document and the characters of its scalars,
    aliases expanded, raising _Refused past a limit.

    A depth-first walk in document order, which is the order PyYAML composed it in:
    the first time a node is met is where its anchor stands, any later time is an
    alias, which counts as everything under the anchor (remembered per node, so
    nothing is walked twice), and meeting a node still being walked is an alias to
    one of its own ancestors. The loop runs per node and calls nothing for a scalar;
    entering, leaving and aliasing a sequence or mapping are the helpers below.
    """
    if not isinstance(root, MappingNode | SequenceNode):
        return 2, 0  # the document node and the root, a scalar refused after (no object)
    finished: _Finished = {}
    walking = {id(root)}
    stack = [_Frame(root, 1, 0)]
    decoded, aliased, characters = 2, 0, 0  # the document node and the root
    while stack:
        frame = stack[-1]
        for child in frame.children:
            key = id(child)
            done = finished.get(key)
            if done is not None:
                decoded, aliased = _alias(frame, done, len(stack), decoded, aliased, room)
                characters += done[2]
                continue
            decoded += 1
            # go-yaml checks its rule at every decode; the first test keeps that cheap.
            if aliased > _ALIAS_RULE_MIN_ALIASED and _too_aliased(aliased, decoded):
                raise _Refused(_TOO_ALIASED)
            if isinstance(child, ScalarNode):
                finished[key] = (1, 0, len(child.value))
                characters += len(child.value)
                continue
            _enter(stack, walking, child, decoded - 1, characters)
            break
        else:
            _leave(stack, walking, finished, decoded, characters)
    return decoded, characters


def _enter(stack: list[_Frame], walking: set[int], node: Node, start: int, characters: int) -> None:
    """Walk into a sequence or mapping (``start``, ``characters``: the counts before
    it), refused when it is one of its own ancestors or one level too deep."""
    key = id(node)
    if key in walking:
        raise _Refused(_RECURSIVE)
    walking.add(key)
    stack.append(_Frame(node, start, characters))
    if len(stack) > MAX_DEPTH:
        raise _Refused(TOO_DEEP)


def _leave(
    stack: list[_Frame], walking: set[int], finished: _Finished, decoded: int, characters: int
) -> None:
    """The sequence or mapping on top of the stack is walked: remember what it
    expands to and its height, which its parent takes if it is the tallest child."""
    frame = stack.pop()
    walking.discard(frame.key)
    height = frame.height + 1
    finished[frame.key] = (decoded - frame.start, height, characters - frame.characters)
    if stack and stack[-1].height < height:
        stack[-1].height = height


def _alias(
    frame: _Frame, done: tuple[int, int, int], depth: int, decoded: int, aliased: int, room: int
) -> tuple[int, int]:
    """An alias met under ``frame`` (``depth`` frames down) to a node that expands
    to ``done``: go-yaml decodes the alias node, then its target. The decode and
    aliased counts after it, raising _Refused past a limit."""
    decoded += 1 + done[0]
    aliased += done[0]
    frame.height = max(frame.height, done[1])
    _check_alias(depth + done[1], decoded, aliased, room)
    return decoded, aliased


def _check_alias(depth: int, decoded: int, aliased: int, room: int) -> None:
    # Checking after the whole expansion is as good as go-yaml's check at every node
    # of it: within an expansion the aliased share only grows.
    if depth > MAX_DEPTH:
        raise _Refused(TOO_DEEP)
    if decoded > room:
        raise _Refused(_TOO_MANY_NODES)
    if _too_aliased(aliased, decoded):
        raise _Refused(_TOO_ALIASED)
