"""How a health rule's comprehensions are read for the cost bound
(core/health/cel_rules): as CEL's grammar reads the expression (``//`` comments,
line breaks, every form of string literal, number literals), and checked against
what the compiler reads, so that no way of writing a macro call hides a loop from
the bound on nesting."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crs_controller.core.errors import InvalidSpec
from crs_controller.core.health import cel_rules
from crs_controller.core.health.cel_rules import MACROS, compile_expression

WHERE = "spec.healthCheck.rules[0].ready"
UNREADABLE = "cannot be read reliably"


@pytest.mark.parametrize(
    "source",
    [
        # A comment between a macro's name and its '(': the parser reads a call.
        "self.a.all(i, self.a.all //\n(i, self.a.all //\n(i, self.a.all //\n"
        "(i, self.a.all //\n(i, i >= 0)))))",
        "self.a.all(x, self.a.all(y, self.a.all // (\n (z, true)))",
        # A quote in a comment opens no string.
        "// don't\nself.a.all(x, self.a.all(y, self.a.all(z, true)))",
        # existsOne is exists_one's other spelling.
        "self.a.existsOne(x, self.a.existsOne(y, self.a.existsOne(z, true)))",
        # A number ends before '.' and a name: 1.all(..) is a call on 1.
        "self.a.all(x, self.a.all(y, 1.all(z, true)))",
        "self.a.all(x, self.a.all(y, 1.5.all(z, true)))",
    ],
)
def test_nesting_however_written_is_refused(source: str) -> None:
    with pytest.raises(InvalidSpec) as raised:
        compile_expression(source, WHERE)
    assert str(raised.value) == f"{WHERE}: comprehensions nested more than 2 deep"


def test_a_comment_is_read_as_nothing() -> None:
    plain = "self.a.exists(c, c == 1) && self.b == '//'"
    commented = (
        "self.a.exists(c, c == 1) // self.b.all(x, self.b.all(y, self.b.all(z, (\n"
        "&& self.b == '//' // it's the last line"
    )
    expr = compile_expression(commented, WHERE)
    expected = compile_expression(plain, WHERE)
    assert (expr.depth, expr.ops, expr.concatenations) == (1, expected.ops, 0)


def test_macro_calls_the_tokens_miss_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    # Were the tokens to miss a macro, the compiler's reading refuses the expression.
    monkeypatch.setattr(cel_rules, "MACROS", MACROS - {"exists"})
    with pytest.raises(InvalidSpec) as raised:
        compile_expression("self.a.exists(x, true)", WHERE)
    assert UNREADABLE in str(raised.value)


def test_nesting_the_tokens_misread_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    # Tokens blind to comments close the first call inside the comment: depth 1 for
    # them, 2 for the compiler, whose probe then does not compile.
    tokens = cel_rules._tokens

    def comment_blind(source: str) -> Iterator[tuple[int, str]]:
        return tokens(source.replace("//", "/ "))

    monkeypatch.setattr(cel_rules, "_tokens", comment_blind)
    source = "self.a.all(x, // ) && (\n self.a.all(y, true))"
    with pytest.raises(InvalidSpec) as raised:
        compile_expression(source, WHERE)
    assert str(raised.value).startswith(f"{WHERE}: its comprehension macros {UNREADABLE}")


# What may be written around a macro's name and between its arguments without changing
# what the expression computes: whitespace CEL reads, and comments holding brackets,
# quotes, macro names and other characters.
_NOISE = ["", " ", "\n\t\r\f", " // ) ( self.a.all(z, 'q\n", "//\n", '// é )) """\n']
_LEAVES = ["x == y", "true", "self.a == 'all(' + \"//\"", "r'\\' == b'''//'''", "0x1Fu > 1.5e3"]


@st.composite
def _nested(draw: st.DrawFn, depth: int = 0) -> tuple[str, str]:
    """An expression of nested comprehensions, and the same written with noise."""
    if depth >= 4 or (depth > 0 and draw(st.booleans())):
        leaf = draw(st.sampled_from(_LEAVES))
        return leaf, leaf
    name = draw(st.sampled_from(sorted(MACROS)))
    receiver = draw(st.sampled_from(["self.a", "[1, 2]", "x", "(self.a + [3])"]))
    var = draw(st.sampled_from(["x", "y"]))
    body, noisy_body = draw(_nested(depth + 1))
    if draw(st.booleans()):
        other, noisy_other = draw(_nested(depth + 1))
        body, noisy_body = f"{body} && {other}", f"{noisy_body} &&{noisy_other}"
    n = [draw(st.sampled_from(_NOISE)) for _ in range(4)]
    plain = f"{receiver}.{name}({var}, {body})"
    return plain, f"{receiver}.{n[0]}{name}{n[1]}({n[2]}{var},{n[3]}{noisy_body})"


def _reading(source: str) -> tuple[int, int, int, int] | str:
    try:
        expr = compile_expression(source, WHERE)
    except InvalidSpec as refused:
        return str(refused)
    return expr.depth, expr.ops, expr.concatenations, expr.literal_width


@settings(max_examples=200, deadline=None)
@given(pair=_nested())
def test_noise_around_macro_calls_changes_nothing(pair: tuple[str, str]) -> None:
    plain, noisy = pair
    reading = _reading(plain)
    assert _reading(noisy) == reading, noisy
    assert UNREADABLE not in str(reading), plain
