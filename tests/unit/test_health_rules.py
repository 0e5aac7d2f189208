"""Health rules in CEL (core/health_rules): which rules compile (and the InvalidSpec
naming a bad one), what a rule says of an object (failed first, then ready; a
non-bool or an error is not Ready, naming the rule and never a value), the cost
bound (anything the compiler accepts runs within it or is refused before running),
and a broken rule making its CRS InvalidSpec when parsed."""

from __future__ import annotations

import time
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crs_controller.core.errors import InvalidSpec
from crs_controller.core.health import object_health
from crs_controller.core.health_rules import (
    COST_LIMIT,
    CompiledRule,
    Verdict,
    compile_expression,
    compile_rules,
    evaluate,
    rule_for,
)
from crs_controller.core.models import HealthRule
from crs_controller.core.objects import parse_crs


def rule(ready: str, failed: str | None = None, kind: str = "Widget") -> CompiledRule:
    spec = HealthRule(api_version="example.com/v1", kind=kind, ready=ready, failed=failed)
    return compile_rules([spec])[0]


@pytest.mark.parametrize(
    "source",
    [
        "has(self.status) && self.status.phase == 'Ready'",
        "self.status.conditions.exists(c, c.type == 'Ready' && c.status == 'True')",
        "self.spec.items.all(x, self.spec.items.exists(y, x == y))",
        "self.a == 'all(x, foo) [1,2,3] \\' \"'",
        'self.a == """ exists(y, z) """ && self.b == r\'\\d+\' && self.c == b"x"',
        "[1, 2, 3].map(x, x * 2).size() == 3",
        "self.s.matches('^[a-z]+$')",
    ],
)
def test_compiles(source: str) -> None:
    assert compile_expression(source, "w").program.source == source


@pytest.mark.parametrize(
    ("ready", "failed", "message"),
    [
        ("self.status.phase ==", None, "spec.healthCheck.rules[0].ready: does not compile: 1:"),
        ("true", "self.x(", "spec.healthCheck.rules[0].failed: does not compile: 1:"),
        ("other.phase == 'Ready'", None, "rules[0].ready: unknown variable 'other'"),
        (
            "self.a.all(x, self.b.all(y, self.c.all(z, x == y && y == z)))",
            None,
            "rules[0].ready: comprehensions nested more than 2 deep",
        ),
        ("self.a.all(x, true) && " * 4 + "self.a.all(x, true)", None, "more than 4"),
        ("true || " * 600 + "true", None, "longer than 1024 characters"),
    ],
)
def test_refused_when_compiled(ready: str, failed: str | None, message: str) -> None:
    spec = HealthRule.model_construct(api_version="v1", kind="K", ready=ready, failed=failed)
    with pytest.raises(InvalidSpec) as raised:
        compile_rules([spec])
    assert message in str(raised.value), str(raised.value)


def test_the_parser_message_does_not_quote_the_expression() -> None:
    with pytest.raises(InvalidSpec) as raised:
        compile_expression("self.secretive_field == 'hush' +", "spec.healthCheck.rules[1].ready")
    message = str(raised.value)
    assert message.startswith("spec.healthCheck.rules[1].ready: does not compile: 1:")
    assert "secretive" not in message and "hush" not in message


READY_RULE = "has(self.status) && self.status.phase == 'Ready'"


@pytest.mark.parametrize(
    ("ready", "failed", "obj", "expected"),
    [
        (READY_RULE, None, {"status": {"phase": "Ready"}}, Verdict("Ready")),
        (
            READY_RULE,
            None,
            {"status": {"phase": "Starting"}},
            Verdict("InProgress", "spec.healthCheck.rules[0].ready is false"),
        ),
        (
            READY_RULE,
            "has(self.status) && self.status.phase == 'Broken'",
            {"status": {"phase": "Broken"}},
            Verdict("Failed", "spec.healthCheck.rules[0].failed is true"),
        ),
        (
            "self.status.phase",
            None,
            {"status": {"phase": "a-secret-value"}},
            Verdict(
                "InProgress", "spec.healthCheck.rules[0].ready: result is a string, not a bool"
            ),
        ),
        (
            "self.status.phase == 'Ready'",
            None,
            {},
            Verdict(
                "InProgress",
                "spec.healthCheck.rules[0].ready: no such field (guard optional fields with has())",
            ),
        ),
        (
            "self.spec.size + 1 > 0",
            None,
            {"spec": {"size": "a-secret-value"}},
            Verdict(
                "InProgress", "spec.healthCheck.rules[0].ready: no operation for these value types"
            ),
        ),
        (
            "true",
            "self.status.phase == 'x'",
            {},
            Verdict(
                "InProgress",
                "spec.healthCheck.rules[0].failed: no such field"
                " (guard optional fields with has())",
            ),
        ),
    ],
)
def test_evaluate(ready: str, failed: str | None, obj: dict[str, Any], expected: Verdict) -> None:
    assert evaluate(rule(ready, failed), obj) == expected


def test_over_the_cost_limit_is_refused_before_running() -> None:
    expensive = rule("self.items.all(x, self.items.exists(y, x == y))")
    verdict = evaluate(expensive, {"items": list(range(5000))})
    assert verdict == Verdict(
        "InProgress", f"spec.healthCheck.rules[0].ready: over the cost limit ({COST_LIMIT})"
    )


def test_a_rule_wins_over_kstatus_for_exactly_its_kind() -> None:
    widget = rule(READY_RULE)
    assert rule_for([widget], "example.com/v1", "Widget") is widget
    assert rule_for([widget], "example.com/v2", "Widget") is None
    assert rule_for([widget], "example.com/v1", "Gadget") is None
    # kstatus alone calls an object without conditions Ready.
    assert object_health({"kind": "Widget"}).ready
    assert object_health({"kind": "Widget"}, widget).state == "InProgress"


_json = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 5) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=30) | st.dictionaries(st.text(max_size=3), inner, max_size=8)
    ),
    max_leaves=400,
)
_atoms = st.sampled_from(["self", "x", "y", "[1, 2, 3]", "self.a", "'s'", "1"])


@st.composite
def _expressions(draw: st.DrawFn, depth: int = 0) -> str:
    if depth >= 4 or draw(st.booleans()):
        return draw(_atoms)
    a = draw(_expressions(depth + 1))
    b = draw(_expressions(depth + 1))
    form = draw(
        st.sampled_from(
            [
                "{a} == {b}",
                "{a} in {b}",
                "{a} + {b}",
                "size({a}) > 0",
                "{a}.all(x, {b})",
                "{a}.exists(y, {b})",
                "{a}.map(x, {b})",
                "{a}.filter(y, {b})",
                "has(self.a) && {b}",
            ]
        )
    )
    return form.format(a=a, b=b)


@settings(max_examples=150, deadline=None)
@given(source=_expressions(), obj=st.dictionaries(st.sampled_from(["a", "b"]), _json, max_size=2))
def test_accepted_expressions_run_within_the_bound_or_are_refused(source: str, obj: Any) -> None:
    try:
        compiled = rule(f"({source}) == true")
    except InvalidSpec:
        return  # refused when compiled
    started = time.perf_counter()
    verdict = evaluate(compiled, obj)
    elapsed = time.perf_counter() - started
    # Within the estimate's budget (a few tens of ms), with room for a slow machine.
    assert elapsed < 0.25 or "over the cost limit" in verdict.message, (source, elapsed)


def test_parse_crs_makes_a_broken_rule_invalid_spec() -> None:
    raw = {
        "apiVersion": "addons.crs.dev/v1alpha1",
        "kind": "ClusterResourceSet",
        "metadata": {"name": "c", "namespace": "n", "generation": 1},
        "spec": {
            "clusterSelector": {"matchLabels": {"a": "b"}},
            "resources": [{"kind": "ConfigMap", "name": "m"}],
            "healthCheck": {
                "wait": True,
                "rules": [
                    {"apiVersion": "v1", "kind": "ConfigMap", "ready": "true"},
                    {"apiVersion": "v1", "kind": "Secret", "ready": "self.data ==="},
                ],
            },
        },
    }
    crs = parse_crs(raw)
    assert crs.model is None and crs.problem is not None
    assert crs.problem.reason == "InvalidSpec"
    assert str(crs.problem).startswith("spec.healthCheck.rules[1].ready: does not compile")
    raw["spec"]["healthCheck"]["rules"].pop()
    parsed = parse_crs(raw)
    assert parsed.problem is None and [r.kind for r in parsed.health_rules] == ["ConfigMap"]
