"""What a PromQL expression reads: each metric name it selects and the labels it
needs that metric's series to carry (its matchers, and the ``by``/``on`` labels of
the aggregations and matches around it). Enough of PromQL for the rules and the
dashboard in config/monitoring: selectors, ranges, function calls, aggregations with
``by``/``without`` before their argument, binary operators with ``on``/``ignoring``.
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from pathlib import Path
from typing import Any

import yaml

TOKEN = re.compile(
    r"""\s*(?:
      (?P<string>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*')
    | (?P<range>\[[^\]]*\])
    | (?P<number>\d+(?:\.\d+)?(?:[eE][+-]?\d+)?)
    | (?P<ident>[A-Za-z_:][\w:]*)
    | (?P<op>=~|!~|!=|==|>=|<=|[{}(),=<>/*+\-^%])
    )""",
    re.VERBOSE,
)
KEYWORDS = {
    "by", "without", "on", "ignoring", "group_left", "group_right", "bool",
    "and", "or", "unless", "offset",
}  # fmt: skip

AGGREGATIONS = {
    "sum", "min", "max", "avg", "group", "stddev", "stdvar", "count", "count_values",
    "bottomk", "topk", "quantile", "limitk", "limit_ratio",
}  # fmt: skip
CLAUSES = ("by", "without", "on", "ignoring", "group_left", "group_right")

Needs = dict[str, set[str]]


def tokens(expr: str) -> list[str]:
    found, at = [], 0
    expr = expr.rstrip()
    while at < len(expr):
        match = TOKEN.match(expr, at)
        if match is None or match.end() == at:
            raise ValueError(f"cannot read PromQL at {expr[at : at + 20]!r}")
        found.append(match.group().strip())
        at = match.end()
    return found


def nest(flat: list[str]) -> list[Any]:
    """Parenthesised groups as nested lists."""
    stack: list[list[Any]] = [[]]
    for token in flat:
        if token == "(":
            stack.append([])
        elif token == ")":
            group = stack.pop()
            stack[-1].append(group)
        else:
            stack[-1].append(token)
    assert len(stack) == 1, "unbalanced parentheses"
    return stack[0]


def _names(group: list[Any]) -> set[str]:
    return {t for t in group if isinstance(t, str) and re.fullmatch(r"[A-Za-z_]\w*", t)}


def _merge(into: Needs, more: Needs) -> None:
    for name, labels in more.items():
        into[name] |= labels


def _matchers(seq: list[Any], at: int) -> tuple[set[str], int]:
    """The label names of a ``{...}`` starting at ``at``; returns them and the index
    after the closing brace."""
    labels: set[str] = set()
    at += 1
    while seq[at] != "}":
        if seq[at + 1] in ("=", "!=", "=~", "!~"):
            labels.add(seq[at])
        at += 1
    return labels, at + 1


def _clause(
    seq: list[Any], at: int, inherited: frozenset[str], found: Needs
) -> tuple[int, set[str]]:
    """A ``by``/``without``/``on``/``ignoring``/``group_*`` clause at ``at``: what it
    adds (the aggregated argument's needs into ``found``) and the ``on`` labels both
    sides of a match need; returns the index after it."""
    item, labels = seq[at], _names(seq[at + 1])
    if item == "by" and at + 2 < len(seq) and isinstance(seq[at + 2], list):
        _merge(found, _needs(seq[at + 2], inherited | labels))
        return at + 3, set()
    return at + 2, labels if item == "on" else set()


def _needs(seq: list[Any], inherited: frozenset[str]) -> Needs:
    found: Needs = defaultdict(set)
    matched: set[str] = set()  # on (...) labels: both sides need them
    at = 0
    while at < len(seq):
        item = seq[at]
        following = seq[at + 1] if at + 1 < len(seq) else None
        if isinstance(item, list):
            _merge(found, _needs(item, inherited))
        elif item in CLAUSES and isinstance(following, list):
            at, labels = _clause(seq, at, inherited, found)
            matched |= labels
            continue
        elif _is_selector(item, following):
            labels: set[str] = set()
            if following == "{":
                labels, at = _matchers(seq, at + 1)
                at -= 1
            found[item] |= labels | inherited
        at += 1
    return {name: labels | matched for name, labels in found.items()}


def _is_selector(item: str, following: Any) -> bool:
    """A metric name: an identifier that is no keyword, aggregation or function call."""
    return (
        re.fullmatch(r"[A-Za-z_:][\w:]*", item) is not None
        and item not in KEYWORDS | AGGREGATIONS
        and not isinstance(following, list)
    )


def needs(expr: str) -> Needs:
    """Metric name -> the labels the expression needs its series to carry."""
    return _needs(nest(tokens(expr)), frozenset())


def rule_expressions(path: Path) -> list[str]:
    rule = yaml.safe_load(path.read_text())
    return [r["expr"] for g in rule["spec"]["groups"] for r in g["rules"]]


def dashboard_expressions(path: Path) -> list[str]:
    found: list[str] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if isinstance(node.get("expr"), str):
                found.append(node["expr"])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(json.loads(path.read_text()))
    return found


def all_needs(expressions: list[str]) -> Needs:
    total: Needs = defaultdict(set)
    for expr in expressions:
        _merge(total, needs(expr))
    return dict(total)
