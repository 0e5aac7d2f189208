"""``metav1.LabelSelector`` matching, in the API's camelCase form.

One deliberate difference from Kubernetes: a missing or empty selector matches
NOTHING. A ClusterResourceSet whose ``clusterSelector`` was left empty by mistake
must not install its add-ons on every cluster of the namespace (Cluster API makes
the same choice).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from crs_controller.core.errors import InvalidSpec

__all__ = ["matches_validated", "selector_matches", "validate_selector"]

_FIELDS = frozenset({"matchLabels", "matchExpressions"})
_SET_OPERATORS = frozenset({"In", "NotIn"})
_EXISTENCE_OPERATORS = frozenset({"Exists", "DoesNotExist"})


def validate_selector(selector: Mapping[str, Any] | None) -> None:
    """Raise InvalidSpec if ``selector`` is not a well-formed LabelSelector.

    None and ``{}`` are valid (they simply match nothing).
    """
    if selector is None:
        return
    if not isinstance(selector, Mapping):
        raise InvalidSpec("clusterSelector must be an object")
    # Unknown fields are refused rather than ignored: a snake_case "match_labels"
    # would otherwise silently turn into an empty selector.
    unknown = sorted(set(selector) - _FIELDS)
    if unknown:
        raise InvalidSpec(f"clusterSelector has unknown field(s): {', '.join(unknown)}")
    labels = selector.get("matchLabels") or {}
    if not isinstance(labels, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in labels.items()
    ):
        raise InvalidSpec("clusterSelector.matchLabels must map strings to strings")
    expressions = selector.get("matchExpressions") or []
    if not isinstance(expressions, list):
        raise InvalidSpec("clusterSelector.matchExpressions must be a list")
    for index, expression in enumerate(expressions):
        _validate_expression(index, expression)


def _validate_expression(index: int, expression: Any) -> None:
    where = f"clusterSelector.matchExpressions[{index}]"
    if not isinstance(expression, Mapping):
        raise InvalidSpec(f"{where} must be an object")
    key = expression.get("key")
    if not isinstance(key, str) or not key:
        raise InvalidSpec(f"{where}.key must be a non-empty string")
    operator = expression.get("operator")
    values = expression.get("values") or []
    if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
        raise InvalidSpec(f"{where}.values must be a list of strings")
    if operator in _SET_OPERATORS:
        if not values:
            raise InvalidSpec(f"{where}: operator {operator} needs at least one value")
    elif operator in _EXISTENCE_OPERATORS:
        if values:
            raise InvalidSpec(f"{where}: operator {operator} takes no values")
    else:
        raise InvalidSpec(
            f"{where}: invalid operator {operator!r} (expected In, NotIn, Exists or DoesNotExist)"
        )


def selector_matches(selector: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
    """True if ``labels`` satisfy every term of ``selector``; an empty selector matches none.

    Raises InvalidSpec for a malformed selector, so that a broken one is reported
    instead of quietly matching nothing.
    """
    validate_selector(selector)
    return matches_validated(selector, labels)


def matches_validated(selector: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
    """``selector_matches`` for a selector validated once already (a parsed CRS's):
    matching every Cluster of a fleet should not validate it again each time."""
    if not selector:
        return False
    match_labels: Mapping[str, str] = selector.get("matchLabels") or {}
    expressions: list[Mapping[str, Any]] = selector.get("matchExpressions") or []
    if not match_labels and not expressions:
        return False
    if any(labels.get(key) != value for key, value in match_labels.items()):
        return False
    return all(_expression_matches(expression, labels) for expression in expressions)


def _expression_matches(expression: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    key: str = expression["key"]
    operator: str = expression["operator"]
    values: list[str] = expression.get("values") or []
    if operator == "In":
        return key in labels and labels[key] in values
    if operator == "NotIn":  # Kubernetes: an absent label is "not in" any set
        return key not in labels or labels[key] not in values
    if operator == "Exists":
        return key in labels
    return key not in labels  # DoesNotExist; validate_selector refused anything else
