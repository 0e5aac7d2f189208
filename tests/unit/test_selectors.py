"""Cluster selectors: matchLabels/matchExpressions semantics, empty selectors, bad input."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from crs_controller.core.api.selectors import selector_matches, validate_selector
from crs_controller.core.errors import InvalidSpec

LABELS = {"cni": "calico", "env": "prod", "tier": ""}


def expr(key: str, operator: str, *values: str) -> dict[str, Any]:
    expression: dict[str, Any] = {"key": key, "operator": operator}
    if values:
        expression["values"] = list(values)
    return {"matchExpressions": [expression]}


@pytest.mark.parametrize(
    ("selector", "matches"),
    [
        # Product decision: no selector, or an empty one, selects no cluster.
        (None, False),
        ({}, False),
        ({"matchLabels": {}}, False),
        ({"matchLabels": {}, "matchExpressions": []}, False),
        ({"matchLabels": None, "matchExpressions": None}, False),
        ({"matchLabels": {"cni": "calico"}}, True),
        ({"matchLabels": {"cni": "calico", "env": "prod"}}, True),
        ({"matchLabels": {"cni": "calico", "env": "dev"}}, False),
        ({"matchLabels": {"cni": "cilium"}}, False),
        ({"matchLabels": {"missing": "x"}}, False),
        ({"matchLabels": {"tier": ""}}, True),
        (expr("env", "In", "prod", "staging"), True),
        (expr("env", "In", "dev"), False),
        (expr("missing", "In", "x"), False),
        (expr("env", "NotIn", "dev"), True),
        (expr("env", "NotIn", "prod"), False),
        (expr("missing", "NotIn", "x"), True),  # Kubernetes: absent is "not in"
        (expr("env", "Exists"), True),
        (expr("tier", "Exists"), True),
        (expr("missing", "Exists"), False),
        (expr("missing", "DoesNotExist"), True),
        (expr("env", "DoesNotExist"), False),
        # matchLabels AND matchExpressions
        ({"matchLabels": {"cni": "calico"}, **expr("env", "In", "prod")}, True),
        ({"matchLabels": {"cni": "calico"}, **expr("env", "In", "dev")}, False),
        ({"matchLabels": {"cni": "cilium"}, **expr("env", "In", "prod")}, False),
        (
            {
                "matchExpressions": [
                    {"key": "env", "operator": "In", "values": ["prod"]},
                    {"key": "gpu", "operator": "DoesNotExist"},
                ]
            },
            True,
        ),
    ],
)
def test_matches(selector: dict[str, Any] | None, matches: bool) -> None:
    assert selector_matches(selector, LABELS) is matches


@pytest.mark.parametrize(
    ("selector", "message"),
    [
        (expr("env", "Equals", "prod"), "invalid operator 'Equals'"),
        (expr("env", "Gt", "1"), "invalid operator"),
        ({"matchExpressions": [{"key": "env"}]}, "invalid operator None"),
        (expr("env", "In"), "needs at least one value"),
        (expr("env", "NotIn"), "needs at least one value"),
        (expr("env", "Exists", "x"), "takes no values"),
        (expr("env", "DoesNotExist", "x"), "takes no values"),
        ({"matchExpressions": [{"operator": "Exists"}]}, "key must be"),
        ({"matchExpressions": [{"key": "a", "operator": "In", "values": "a"}]}, "list of strings"),
        ({"matchExpressions": {"key": "a"}}, "must be a list"),
        ({"matchExpressions": ["env"]}, r"matchExpressions\[0\] must be an object"),
        ({"matchLabels": {"a": 1}}, "strings to strings"),
        ({"matchLabels": ["a"]}, "strings to strings"),
        ({"match_labels": {"a": "b"}}, "unknown field"),
    ],
)
def test_invalid_selectors_are_reported(selector: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidSpec, match=message):
        validate_selector(selector)
    with pytest.raises(InvalidSpec, match=message):
        selector_matches(selector, LABELS)


@pytest.mark.parametrize("selector", [None, {}, {"matchLabels": {"a": "b"}}, expr("a", "Exists")])
def test_valid_selectors_pass(selector: dict[str, Any] | None) -> None:
    validate_selector(selector)


label_maps = st.dictionaries(st.sampled_from("abcd"), st.sampled_from(["x", "y", ""]), max_size=4)


@given(labels=label_maps, wanted=label_maps)
def test_match_labels_is_a_subset_check(labels: dict[str, str], wanted: dict[str, str]) -> None:
    expected = bool(wanted) and wanted.items() <= labels.items()
    assert selector_matches({"matchLabels": wanted}, labels) is expected


@given(
    labels=label_maps,
    key=st.sampled_from("abcd"),
    values=st.sets(st.sampled_from("xy"), min_size=1),
)
def test_in_and_notin_are_complements(labels: dict[str, str], key: str, values: set[str]) -> None:
    inside = selector_matches(expr(key, "In", *sorted(values)), labels)
    outside = selector_matches(expr(key, "NotIn", *sorted(values)), labels)
    assert inside is not outside
