"""Health rules in CEL (core/health/cel_rules): which rules compile (and the InvalidSpec
naming a bad one), what a rule says of an object (failed first, then ready; a
non-bool or an error is not Ready, naming the rule and never a value), unknown
functions refused when compiled, the cost bound (anything the compiler accepts is
refused before running or estimated within the limit, and the estimate bounds the
comprehension steps the interpreter really takes), and a broken rule making its CRS
InvalidSpec when parsed."""

from __future__ import annotations

import contextlib
import subprocess
import sys
from dataclasses import dataclass
from typing import Any

import cel
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crs_controller.core.api.models import HealthRule
from crs_controller.core.errors import InvalidSpec
from crs_controller.core.health.cel_rules import (
    CHECK_COST_LIMIT,
    COST_LIMIT,
    FUNCTIONS,
    OBJECT_UNITS,
    OPERATORS,
    CompiledRule,
    Verdict,
    _measure,
    compile_expression,
    compile_rules,
    evaluate,
    rule_for,
)
from crs_controller.core.health.readiness import first_not_ready, object_health
from crs_controller.core.spec.objects import parse_crs


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
        "type(self.replicas) == int && type(self.name) == string",
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


@pytest.mark.parametrize(
    ("ready", "failed", "message"),
    [
        ("foo()", None, "spec.healthCheck.rules[0].ready: unknown function 'foo'"),
        ("self.status.phase.lowerAscii() == 'ready'", None, "ready: unknown function"),
        ("true", "max(self.a, 1) > 2", "spec.healthCheck.rules[0].failed: unknown function"),
        ("[1].all(x, x.bogus())", None, "rules[0].ready: unknown function 'bogus'"),
    ],
)
def test_unknown_functions_are_refused_when_compiled(
    ready: str, failed: str | None, message: str
) -> None:
    spec = HealthRule.model_construct(api_version="v1", kind="K", ready=ready, failed=failed)
    with pytest.raises(InvalidSpec) as raised:
        compile_rules([spec])
    assert message in str(raised.value), str(raised.value)


def test_an_unknown_function_message_does_not_quote_the_expression() -> None:
    with pytest.raises(InvalidSpec) as raised:
        compile_expression("hush(self.secretive_field) == 'x'", "spec.healthCheck.rules[2].ready")
    message = str(raised.value)
    assert message.startswith("spec.healthCheck.rules[2].ready: unknown function")
    assert "secretive" not in message and "== 'x'" not in message


@pytest.mark.parametrize(
    "source",
    [
        "size(self.l) == 2 && self.l.size() == 2 && self.m.size() == 1 && size(self.s) == 5",
        "self.s.contains('ll') && self.s.startsWith('h') && self.s.endsWith('o')",
        "self.s.matches('^h.*o$') && 'hello' in [self.s] && 'k' in self.m",
        "int('1') == 1 && uint(1) == 1u && double(1) == 1.0 && string(1) == '1'",
        "bytes('a') == b'a' && dyn(1) == 1 && type(1) == type(2) && !(1 > 2) && -1 < 0",
        "timestamp(self.t).getFullYear() == 2024 && timestamp(self.t).getMonth() == 0",
        "timestamp(self.t).getDate() == 2 && timestamp(self.t).getDayOfMonth() == 1",
        "timestamp(self.t).getDayOfYear() == 1 && timestamp(self.t).getDayOfWeek() == 2",
        "timestamp(self.t).getHours() == 3 && timestamp(self.t).getMinutes() == 4",
        "duration('90s').getSeconds() == 90 && duration('1s').getMilliseconds() == 1000",
        "self.l.all(x, x > 0) && self.l.exists(x, x == 2) && self.l.exists_one(x, x == 1)",
        "self.l.map(x, x * 2)[1] % 3 == 1 && self.l.filter(x, x != 1).size() / 1 == 1",
        "has(self.m.k) && self.m['k'] >= 1 && self.m.k <= 1 ? true : false",
    ],
)
def test_the_standard_functions_compile_and_run(source: str) -> None:
    obj = {"l": [1, 2], "m": {"k": 1}, "s": "hello", "t": "2024-01-02T03:04:05Z"}
    called = set(compile_expression(source, "w").program.functions())
    assert called <= FUNCTIONS | OPERATORS
    assert evaluate(rule(source), obj) == Verdict("Ready")


def test_every_allowed_name_is_one_the_interpreter_defines() -> None:
    """A later library that dropped one would fail here, not at a user's evaluation."""
    used = set()
    for source in [
        "size('a') + 'ab'.size() > 0 && 'a'.contains('a') && 'a'.startsWith('a')",
        "'a'.endsWith('a') && 'a'.matches('a') && int(1) == 1 && uint(1) == 1u",
        "double(1) == 1.0 && string(1) == '1' && bytes('a') == b'a' && dyn(1) == 1",
        "type(1) == type(2) && timestamp('2024-01-02T03:04:05Z').getFullYear() > 0",
        "duration('1s').getMilliseconds() >= 0 && duration('1s').getHours() >= 0",
    ] + [
        f"timestamp('2024-01-02T03:04:05Z').{name}() >= 0"
        for name in sorted(FUNCTIONS)
        if name.startswith("get")
    ]:
        program = cel.compile(source)
        assert program.execute({}) is True, source
        used |= set(program.functions())
    assert used >= FUNCTIONS


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
# Objects whose ``a`` is often a list (of lists), so that comprehensions take steps.
_ints = st.integers(-5, 5)
_objects = st.fixed_dictionaries(
    {"a": st.lists(_ints | st.lists(_ints, max_size=30), max_size=30)}, optional={"b": _json}
) | st.dictionaries(st.sampled_from(["a", "b"]), _json, max_size=2)
_atoms = ["self", "x", "y", "[1, 2, 3]", "self.a", "self.a", "'s'", "1", "true", "false"]
_ranges = ["self.a", "x", "y", "[1, 2, 3]", "self", "self.a + self.a", "self.a + [1, 2, 3]"]
_MACRO_FORMS = ["{a}.all(x, {b})", "{a}.exists(y, {b})", "{a}.map(x, {b})", "{a}.filter(y, {b})"]
_OTHER_FORMS = ["{a} == {b}", "{a} in {b}", "{a} + {b}", "size({a}) > 0", "has(self.a) && {b}"]


@dataclass(frozen=True)
class _Generated:
    """An expression; its twin, whose comprehension bodies count the steps the
    interpreter takes (``step(body)`` counts one and returns the body's value); and
    how many comprehensions it has."""

    source: str
    counted: str
    comprehensions: int = 0


def _leaf(text: str) -> _Generated:
    return _Generated(text, text)


def _compose(form: str, a: _Generated, b: _Generated) -> _Generated:
    macro = form in _MACRO_FORMS
    return _Generated(
        f"({form.format(a=a.source, b=b.source)})",
        f"({form.format(a=a.counted, b=f'step({b.counted})' if macro else b.counted)})",
        a.comprehensions + b.comprehensions + macro,
    )


ALL, EXISTS, MAP, FILTER = _MACRO_FORMS


@st.composite
def _expressions(draw: st.DrawFn, depth: int = 0) -> _Generated:
    if depth >= 4 or (depth > 0 and draw(st.booleans())):
        return _leaf(draw(st.sampled_from(_atoms)))
    form = draw(st.sampled_from(_MACRO_FORMS + _OTHER_FORMS))
    if form in _MACRO_FORMS and draw(st.booleans()):
        a = _leaf(f"({draw(st.sampled_from(_ranges))})")
    else:
        a = draw(_expressions(depth + 1))
    return _compose(form, a, draw(_expressions(depth + 1)))


def _values_and_widest(value: Any) -> tuple[int, int]:
    """JSON values, and the longest list or map (the generated strings are short)."""
    if isinstance(value, dict | list):
        children = [
            _values_and_widest(v) for v in (value.values() if isinstance(value, dict) else value)
        ]
        return 1 + sum(n for n, _ in children), max([len(value), *(w for _, w in children)])
    return 1, 0


class _Overrun(Exception):
    pass


def _steps(counted: str, obj: Any, cap: int) -> int:
    """Comprehension steps the interpreter takes on ``obj``, stopping past ``cap``.
    Compiled by the library directly: our compiler refuses ``step``, as it should."""
    taken = 0

    def step(value: Any) -> Any:
        nonlocal taken
        taken += 1
        if taken > cap:
            raise _Overrun
        return value

    # An error in the expression, or the overrun, ends the run; the count stands.
    with contextlib.suppress(Exception):
        cel.compile(f"{counted} == true").execute(cel.Context({"self": obj}, {"step": step}))
    return taken


def _assert_refused_or_bounded(generated: _Generated, obj: Any) -> None:
    try:
        compiled = rule(f"{generated.source} == true")
    except InvalidSpec:
        return  # refused when compiled
    expr = compiled.ready
    values, widest = _values_and_widest(obj)
    cost = expr.cost(values, widest)
    verdict = evaluate(compiled, obj)
    over = "over the cost limit" in verdict.message
    converting = _measure(obj).weight * OBJECT_UNITS
    assert over == (cost + converting > COST_LIMIT), (generated.source, cost, verdict)
    if over:
        return
    # Each step may do work linear in the object (``in``, ``==`` on a map, a copy):
    # the estimate covers the steps times the object's values. Sharper: a comprehension
    # nested k deep runs at most width**k steps, so the estimate's share per operator
    # (``width ** depth``, operators counting each comprehension) covers every one.
    per_operator = cost // (max(expr.ops, 1) * values)
    steps = _steps(generated.counted, obj, cap=cost // values)
    assert steps * values <= cost, (generated.source, steps, cost)
    assert steps <= generated.comprehensions * per_operator, (generated.source, steps)


@settings(max_examples=300, deadline=None)
@given(generated=_expressions(), obj=_objects)
def test_accepted_expressions_are_refused_before_running_or_bounded_by_their_estimate(
    generated: _Generated, obj: Any
) -> None:
    _assert_refused_or_bounded(generated, obj)


_A = _leaf("self.a")
_TRUE, _FALSE = _leaf("true"), _leaf("false")
_LITERAL = _leaf("[1, 2, 3]")
_TWICE = _leaf("(self.a + self.a)")
_GRID = {"a": [list(range(10)) for _ in range(10)]}


@pytest.mark.parametrize(
    ("generated", "obj"),
    [
        # The shapes that take the most steps for their size, every step taken.
        (_compose(MAP, _A, _compose(MAP, _A, _TRUE)), {"a": list(range(30))}),
        (_compose(ALL, _A, _compose(ALL, _leaf("x"), _TRUE)), _GRID),
        (_compose(MAP, _TWICE, _compose(FILTER, _TWICE, _FALSE)), {"a": list(range(12))}),
        (_compose(EXISTS, _A, _compose(EXISTS, _A, _FALSE)), {"a": list(range(30))}),
        (_compose(MAP, _LITERAL, _compose(FILTER, _LITERAL, _TRUE)), {}),
        (_compose(MAP, _leaf("([1, 2, 3] + self.a)"), _TRUE), {"a": [1]}),
        # Over the limit: refused before running.
        (_compose(ALL, _A, _compose(EXISTS, _A, _FALSE)), {"a": list(range(300))}),
    ],
    ids=["map", "all-nested", "concatenated", "exists", "literals", "literal-concat", "over"],
)
def test_the_estimate_bounds_the_steps_of_the_costliest_shapes(
    generated: _Generated, obj: Any
) -> None:
    _assert_refused_or_bounded(generated, obj)


def test_parse_crs_makes_a_broken_rule_invalid_spec() -> None:
    raw: dict[str, Any] = {
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


def test_the_interpreter_is_loaded_only_once_a_rule_is_compiled() -> None:
    # Its package brings a command line (some 28 MiB resident) no rule-less CRS needs.
    probe = (
        "import sys\n"
        "import crs_controller.app.runner, crs_controller.core.spec.objects as objects\n"
        "assert 'cel' not in sys.modules\n"
        "from crs_controller.core.health.cel_rules import compile_expression\n"
        "compile_expression('self.x == 1', 'rule')\n"
        "assert 'cel' in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", probe], check=True)


def test_type_names_are_no_variables() -> None:
    rule = HealthRule(
        api_version="example.com/v1",
        kind="Widget",
        ready="type(self.status.replicas) == int && type(self.status.conditions) == list",
    )
    (compiled,) = compile_rules([rule])
    ready = {"status": {"replicas": 3, "conditions": []}}
    assert evaluate(compiled, ready).state == "Ready"
    assert evaluate(compiled, {"status": {"replicas": "3", "conditions": []}}).state != "Ready"


def test_one_health_check_spends_at_most_its_budget_on_rules() -> None:
    # Many objects, each just under the per-evaluation limit: the check stops evaluating
    # once their sum would pass CHECK_COST_LIMIT, and says so for the first left out,
    # rather than hold the event loop for each of them at every poll.
    rule = HealthRule(
        api_version="example.com/v1",
        kind="Widget",
        ready="self.spec.items.all(x, x == 1)",
    )
    (compiled,) = compile_rules([rule])
    obj = {"spec": {"items": [1] * 300}}
    measured = _measure(obj)
    one = compiled.ready.cost(measured.values, measured.width) + measured.weight * OBJECT_UNITS
    assert one <= COST_LIMIT < CHECK_COST_LIMIT < 40 * one
    objects = [(f"Widget w{n}", obj) for n in range(40)]
    found = first_not_ready(objects, [compiled] * len(objects))
    assert found is not None
    label, health = found
    fits = CHECK_COST_LIMIT // one
    assert label == f"Widget w{fits}"
    assert "may cost" in health.message and health.state == "InProgress"
    # A check with fewer of them is Ready: the budget is per check, not per process.
    assert first_not_ready(objects[:fits], [compiled] * fits) is None


def _counting_conversions(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The JSON values of each object converted into the interpreter's values."""
    converted: list[int] = []
    context = cel.Context

    def counted(variables: dict[str, Any], *rest: Any) -> cel.Context:
        converted.append(_values_and_widest(variables["self"])[0])
        return context(variables, *rest)

    monkeypatch.setattr(cel, "Context", counted)
    return converted


def test_converting_the_object_counts_in_the_estimate(monkeypatch: pytest.MonkeyPatch) -> None:
    # ``has(self.status)`` is cheap, but converting a large object is not: its values
    # and map keys count OBJECT_UNITS each. Here the weight is n + 3 (the object, its
    # key, the list, n strings) and the expression 3 operators on n + 2 values.
    converted = _counting_conversions(monkeypatch)
    cheap = rule("has(self.status)")
    fits = (COST_LIMIT - 3 * 2 - 3 * OBJECT_UNITS) // (3 + OBJECT_UNITS)
    assert evaluate(cheap, {"spec": [""] * fits}) == Verdict(
        "InProgress", "spec.healthCheck.rules[0].ready is false"
    )
    assert converted == [fits + 2]
    assert evaluate(cheap, {"spec": [""] * (fits + 1)}) == Verdict(
        "InProgress", f"spec.healthCheck.rules[0].ready: over the cost limit ({COST_LIMIT})"
    )
    assert converted == [fits + 2]


def test_failed_and_ready_share_one_conversion(monkeypatch: pytest.MonkeyPatch) -> None:
    converted = _counting_conversions(monkeypatch)
    both = rule(READY_RULE, "has(self.status) && self.status.phase == 'Broken'")
    assert evaluate(both, {"status": {"phase": "Ready"}}).state == "Ready"
    assert converted == [3]


def test_a_rule_does_not_see_or_pay_for_managed_fields(monkeypatch: pytest.MonkeyPatch) -> None:
    # Who wrote which field says nothing of readiness, and on an object several tools
    # write it can be larger than the rest: too large to convert, were it counted.
    converted = _counting_conversions(monkeypatch)
    managed = [{"manager": f"tool-{i}", "fieldsV1": {"f:spec": {}}} for i in range(3_000)]
    obj = {"metadata": {"name": "a", "managedFields": managed}, "status": {"phase": "Ready"}}
    assert evaluate(rule("!has(self.metadata.managedFields)"), obj).state == "Ready"
    assert converted == [_values_and_widest({"metadata": {"name": "a"}, **obj_rest(obj)})[0]]


def obj_rest(obj: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in obj.items() if key != "metadata"}


def test_a_check_of_objects_too_large_to_convert_stops_measuring_early(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Twenty rules (the most a CRS has), each for its own kind, and one object of each
    # of about 248,000 values (some 1 MB, which the API server and the workload client
    # accept): none is converted, and each is measured only until it is too large.
    converted = _counting_conversions(monkeypatch)
    measured = 0

    class Counted(dict[str, int]):
        def values(self) -> Any:
            nonlocal measured
            measured += 1
            return super().values()

    specs = [
        HealthRule(api_version=f"example.com/v{n}", kind="Widget", ready="has(self.status)")
        for n in range(20)
    ]
    rules = compile_rules(specs)
    item = Counted(k=0)  # three values to convert: the map, its key, its value
    objects = [(f"Widget w{n}", {"spec": [item] * 124_000}) for n in range(20)]
    found = first_not_ready(objects, list(rules))
    assert found is not None
    label, health = found
    assert label == "Widget w0" and health.state == "InProgress"
    assert health.message == (
        f"spec.healthCheck.rules[0].ready: over the cost limit ({COST_LIMIT}):"
        " the object has too many values to convert"
    )
    assert converted == []
    assert 0 < measured <= 20 * (COST_LIMIT // OBJECT_UNITS) // 3 + 20
