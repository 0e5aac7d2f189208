"""Health rules in CEL (``spec.healthCheck.rules``): is an object of a kind kstatus
cannot judge Ready?

A rule names an ``apiVersion`` and ``kind`` and gives CEL expressions on the live
object, bound to ``self``: ``failed`` (optional) is looked at first, then ``ready``.
Each is compiled once, when the CRS is parsed; one that does not compile, or that
asks for more than we allow, makes the spec ``InvalidSpec`` naming the rule.

The interpreter (``cel``, from the ``common-expression-language`` package, a Rust
CEL interpreter) has no cost limit of its own, and evaluation runs on the event
loop, so we bound it ourselves, in two steps:

- When compiling: at most 1024 characters, no variable but ``self`` (and the names
  comprehensions bind), comprehension macros (``all``, ``exists``, ``exists_one``
  or ``existsOne``, ``map``, ``filter``) nested at most ``MAX_DEPTH`` deep and at
  most ``MAX_COMPREHENSIONS`` of them, read from the expression's tokens outside
  string literals and ``//`` comments, as CEL's grammar reads them, and checked
  against what the compiler reads (a probe compiled with each macro call renamed):
  an expression whose macro calls or their brackets the two read differently is
  refused. Only the functions in ``FUNCTIONS`` (the CEL standard functions
  the interpreter defines) and the operators may be called; any other name, read
  from the compiled program, is refused here rather than failing at every
  evaluation. No extension library is loaded: nothing does I/O or calls back into
  Python.
- Before evaluating: an estimate of the work, ``ops * size * width ** depth``,
  where ``size`` is the live object's JSON values (a string counts one more per
  64 characters), ``width`` the longest list or map in the object or a literal in
  the expression (times the number of ``+`` that could concatenate lists), ``ops``
  the expression's operators and calls, ``depth`` its comprehension nesting. Each
  iteration may do linear work (``x in list``, ``==`` on a whole map, ``map`` and
  ``filter`` copy their accumulated list each step, measured quadratic), hence the
  ``size`` factor. To it is added what measuring the object and converting it into
  the interpreter's values cost, ``OBJECT_UNITS`` per value or map key: converting
  is what dominates a cheap rule on a large object (``has(self.status)`` on an object
  of 248,000 values: 0.15-0.3 s). Above ``COST_LIMIT`` the rule is not evaluated and
  the object is not Ready ("over the cost limit"). Measuring stops as soon as the
  object is too large for what is left, so a large object costs no more than one
  that fits, and what was measured is charged to the check's budget
  (``CHECK_COST_LIMIT``) even when it is refused.

Evaluation stays on the event loop: running it in a thread would not free the loop,
since the interpreter holds the GIL while it evaluates (a 0.8 s evaluation in a
thread let the loop's thread run once) and for stretches of a quarter second while
it converts. The budget is what bounds it: about 0.1 s per health check of a CRS on
one cluster.

Measured on the 2-core machine the tests run on (x86_64, best of 5, with other work
running; ``hack/bench/health_rules.py`` prints the figures): one unit, a step of
``x in list``, is 21-27 ns. Converting an object costs 1-2 us per value or map key on
a quiet machine (ints far less, strings and map entries most), up to 5 us on a busy
one, hence 100 units; measuring it 0.1-0.5 us, up to 1.4 us (an empty map, busy),
hence 40. The largest object a rule may look at is thus some 7,000 values and keys
(roughly 4,000 JSON values of a Kubernetes object). A rule with ``failed`` and
``ready`` on a 3,000-value object (5,600 values and keys) takes 13 ms, converting it
once: a ``cel.Context`` built for the first expression that runs holds the converted
values and the other reuses it (a field comparison executes on it in under a
microsecond). One comprehension iteration of a small body costs 220-270 ns (a
1,000,000-iteration depth-3 ``all`` takes 270 ms, which the limit refuses); ``x in
list`` and ``map``'s copy cost 21 ns per element (``map`` over 1,000 items: 21 ms,
over 10,000: 2 s, refused). The worst accepted rule we found compares that
3,000-value map 11 times (``self.spec == self.spec && ...``) and takes 28 ms,
conversion included. ``matches()`` uses Rust's regex crate, linear in the string (a
100,000-character string against ``(a+)+b``: 0.24 ms), with a bound on the compiled
pattern's size; the live object itself is bounded by the workload client's answer
limits (4 MiB).

Messages name the rule (its index and field) and the kind of problem, never a value
read from the object.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from crs_controller.core.api.models import HealthRule
from crs_controller.core.errors import InvalidSpec

if TYPE_CHECKING:
    # Imported where a rule is first compiled or run (see ``compile_expression``).
    import cel

__all__ = [
    "CHECK_COST_LIMIT",
    "CONVERSION_UNITS",
    "COST_LIMIT",
    "FUNCTIONS",
    "MAX_COMPREHENSIONS",
    "MAX_DEPTH",
    "MAX_LENGTH",
    "MEASURE_UNITS",
    "OBJECT_UNITS",
    "OPERATORS",
    "CheckBudget",
    "CompiledRule",
    "Expression",
    "Verdict",
    "compile_expression",
    "compile_rules",
    "evaluate",
    "rule_for",
]

MAX_LENGTH = 1024
MAX_DEPTH = 2
MAX_COMPREHENSIONS = 4
COST_LIMIT = 1_000_000
# What the rules of one health check (every object of a CRS on one cluster) may cost in
# all: a check is repeated every few seconds while something is not Ready, so without
# it a tenant's many near-limit objects would hold the event loop for seconds each time.
CHECK_COST_LIMIT = 4 * COST_LIMIT
STRING_UNIT = 64  # characters of a string that count as one more value
# What each value (or map key) of an object a rule looks at costs, in units of about
# 25 ns (``x in list``'s step): measuring it in Python (0.1-0.5 us, up to 1.4 us for an
# empty map on a busy machine) and converting it into the interpreter's values (1-2 us
# measured on a quiet machine, up to 5 us on a busy one: strings and map entries cost
# most). Measuring is charged even when the object turns out too large, and stops as
# soon as it does.
MEASURE_UNITS = 40
CONVERSION_UNITS = 100
OBJECT_UNITS = MEASURE_UNITS + CONVERSION_UNITS
# The comprehension macros (the parser expands them into loops): ``existsOne`` is
# ``exists_one``'s other spelling.
MACROS = frozenset({"all", "exists", "exists_one", "existsOne", "map", "filter"})
VARIABLE = "self"
# CEL's type names: identifiers, but no variables (``type(self.x) == string``).
TYPE_NAMES = frozenset(
    {"bool", "bytes", "double", "dyn", "int", "list", "map", "null_type", "string", "type", "uint"}
)
# What may be called, as ``Program.functions()`` names it: the functions the
# interpreter defines itself (cel-rust 0.14, through common-expression-language
# 0.10; found by calling each name of the CEL specification's standard definitions
# on values of every type), and the operators. The macros (``has``, ``all``,
# ``exists``, ``exists_one``, ``map``, ``filter``) never appear: the parser expands
# them into operators. Not allowed: the ``optional`` functions (``optional`` would be
# a variable), and anything a context could add, such as ``cel.stdlib``.
FUNCTIONS = frozenset(
    {
        *("size", "contains", "startsWith", "endsWith", "matches"),
        *("int", "uint", "double", "string", "bytes", "timestamp", "duration"),
        *("dyn", "type"),
        *("getFullYear", "getMonth", "getDayOfYear", "getDayOfMonth", "getDate"),
        *("getDayOfWeek", "getHours", "getMinutes", "getSeconds", "getMilliseconds"),
    }
)
OPERATORS = frozenset(
    {
        *("_+_", "_-_", "_*_", "_/_", "_%_", "-_"),
        *("_==_", "_!=_", "_<_", "_<=_", "_>_", "_>=_", "@in"),
        *("_&&_", "_||_", "!_", "_?_:_", "_[_]", "@not_strictly_false"),
    }
)
_PARSER_MESSAGE_LIMIT = 200

VerdictState = Literal["Ready", "InProgress", "Failed"]


@dataclass(frozen=True)
class Verdict:
    """What a rule says of one object; ``message`` is empty when Ready."""

    state: VerdictState
    message: str = ""


@dataclass(frozen=True)
class Expression:
    """One compiled expression and what its cost estimate needs."""

    where: str  # "spec.healthCheck.rules[1].ready", for messages
    program: cel.Program
    depth: int  # deepest nesting of comprehension macros
    ops: int  # operators and calls
    concatenations: int  # '+' that could build a longer list
    literal_width: int  # elements of the longest list literal

    def cost(self, size: int, width: int) -> int:
        wide = max(width, self.literal_width, 1) * (self.concatenations + 1)
        spread: int = wide**self.depth
        return max(self.ops, 1) * max(size, 1) * spread


@dataclass(frozen=True)
class CompiledRule:
    index: int
    api_version: str
    kind: str
    ready: Expression
    failed: Expression | None = None


def compile_rules(rules: Sequence[HealthRule]) -> tuple[CompiledRule, ...]:
    """Every rule compiled, in spec order; ``InvalidSpec`` names the first bad one."""
    compiled = []
    for n, rule in enumerate(rules):
        where = f"spec.healthCheck.rules[{n}]"
        failed = None if rule.failed is None else compile_expression(rule.failed, f"{where}.failed")
        ready = compile_expression(rule.ready, f"{where}.ready")
        compiled.append(CompiledRule(n, rule.api_version, rule.kind, ready, failed))
    return tuple(compiled)


def rule_for(rules: Sequence[CompiledRule], api_version: str, kind: str) -> CompiledRule | None:
    """The first rule for exactly this apiVersion and kind."""
    for rule in rules:
        if rule.api_version == api_version and rule.kind == kind:
            return rule
    return None


def compile_expression(source: str, where: str) -> Expression:
    if len(source) > MAX_LENGTH:
        raise InvalidSpec(f"{where}: longer than {MAX_LENGTH} characters")
    # The interpreter's package also loads its command line (typer, rich,
    # prompt_toolkit: some 28 MiB resident): imported once a first rule is compiled,
    # so a controller whose CRSs have no rules never pays for it.
    import cel  # noqa: PLC0415

    try:
        program = cel.compile(source)
    except Exception as exc:  # the binding raises ValueError; any failure is the same to us
        raise InvalidSpec(f"{where}: does not compile: {_parser_message(str(exc))}") from None
    shape = _bounded_shape(source, where)
    unknown = set(program.variables()) - shape.bound - {VARIABLE} - TYPE_NAMES
    if unknown:
        raise InvalidSpec(f"{where}: unknown variable {sorted(unknown)[0]!r} (only self)")
    unknown = set(program.functions()) - FUNCTIONS - OPERATORS
    if unknown:
        raise InvalidSpec(
            f"{where}: unknown function {sorted(unknown)[0]!r} (only CEL's standard functions)"
        )
    return Expression(
        where, program, shape.depth, shape.ops, shape.concatenations, shape.literal_width
    )


def _bounded_shape(source: str, where: str) -> _Shape:
    """The expression's shape, within the bounds on its comprehensions; refused when
    the tokens do not read it as the compiler does (``_compiler_agrees``)."""
    unreadable = InvalidSpec(
        f"{where}: its comprehension macros cannot be read reliably "
        "(write each as a plain call, such as list.all(x, ...))"
    )
    try:
        shape = _Shape.of(_tokens(source))
    except _Unreadable:
        raise unreadable from None
    if shape.depth > MAX_DEPTH:
        raise InvalidSpec(f"{where}: comprehensions nested more than {MAX_DEPTH} deep")
    if shape.comprehensions > MAX_COMPREHENSIONS:
        raise InvalidSpec(f"{where}: more than {MAX_COMPREHENSIONS} comprehensions")
    if not _compiler_agrees(source, shape):
        raise unreadable
    return shape


@dataclass
class CheckBudget:
    """What is left for rules to cost in one health check (``CHECK_COST_LIMIT``)."""

    remaining: int = CHECK_COST_LIMIT


def evaluate(
    rule: CompiledRule, obj: Mapping[str, Any], budget: CheckBudget | None = None
) -> Verdict:
    """``failed`` first (true: Failed), then ``ready``. Anything but a bool, an
    evaluation error, or an estimate over the limit (of one evaluation, or of what is
    left of the check's ``budget``) is InProgress, naming the rule."""
    subject = _Subject(obj, budget or CheckBudget())
    if rule.failed is not None:
        failed = subject.run(rule.failed)
        if isinstance(failed, Verdict):
            return failed
        if failed:
            return Verdict("Failed", f"{rule.failed.where} is true")
    ready = subject.run(rule.ready)
    if isinstance(ready, Verdict):
        return ready
    return Verdict("Ready") if ready else Verdict("InProgress", f"{rule.ready.where} is false")


def _without_managed_fields(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    """``obj`` as a rule sees it: without ``metadata.managedFields``, which says who
    wrote what, never whether the object is ready, and can hold more values than the
    rest of the object (each one measured and converted)."""
    meta = obj.get("metadata")
    if not isinstance(meta, Mapping) or "managedFields" not in meta:
        return obj
    trimmed = {key: value for key, value in meta.items() if key != "managedFields"}
    return {**obj, "metadata": trimmed}


class _Subject:
    """One live object as the rule's expressions see it: measured once, only as far as
    the check can afford to convert (what is measured is charged to the budget, even
    when the object turns out too large), and converted into the interpreter's values
    at most once (a ``cel.Context`` holds them), when the first expression within the
    cost limit runs; the other reuses it."""

    def __init__(self, obj: Mapping[str, Any], budget: CheckBudget) -> None:
        obj = _without_managed_fields(obj)
        self._obj = obj
        self._budget = budget
        most = min(COST_LIMIT, budget.remaining) // OBJECT_UNITS
        self._measured = _measure(obj, most)
        self._fits = self._measured.weight <= most
        self._over_limit = budget.remaining >= COST_LIMIT  # else: over the budget
        budget.remaining -= min(budget.remaining, self._measured.weight * MEASURE_UNITS)
        self._context: cel.Context | None = None

    def run(self, expr: Expression) -> bool | Verdict:
        refused = self._charge(expr)
        if refused is not None:
            return refused
        import cel  # noqa: PLC0415 - loaded by compile_expression already

        try:
            if self._context is None:
                self._context = cel.Context({VARIABLE: self._obj})
            result = expr.program.execute(self._context)
        except Exception as exc:  # the interpreter's errors are plain built-in exceptions
            return Verdict("InProgress", f"{expr.where}: {_problem(exc)}")
        if not isinstance(result, bool):
            return Verdict(
                "InProgress", f"{expr.where}: result is {_type_name(result)}, not a bool"
            )
        return result

    def _charge(self, expr: Expression) -> Verdict | None:
        """The estimate of running ``expr`` (the object's measuring and converting
        included), spent from the budget; a Verdict when over the limit or budget."""
        if not self._fits:
            if self._over_limit:
                return _over_limit(expr, ": the object has too many values to convert")
            return _over_budget(expr)
        measured = self._measured
        cost = expr.cost(measured.values, measured.width)
        if cost + measured.weight * OBJECT_UNITS > COST_LIMIT:
            return _over_limit(expr)
        if self._context is None:
            cost += measured.weight * CONVERSION_UNITS
        if cost > self._budget.remaining:
            return _over_budget(expr)
        self._budget.remaining -= cost
        return None


def _over_limit(expr: Expression, why: str = "") -> Verdict:
    return Verdict("InProgress", f"{expr.where}: over the cost limit ({COST_LIMIT}){why}")


def _over_budget(expr: Expression) -> Verdict:
    return Verdict(
        "InProgress",
        f"{expr.where}: not evaluated, the rules of one health check may cost "
        f"{CHECK_COST_LIMIT} in all (simplify the rules, or split the CRS)",
    )


def _problem(exc: Exception) -> str:
    """The kind of failure, in our words: the interpreter's can quote values."""
    if isinstance(exc, KeyError):
        return "no such field (guard optional fields with has())"
    if isinstance(exc, TypeError):
        return "no operation for these value types"
    if isinstance(exc, ZeroDivisionError):
        return "division by zero"
    if isinstance(exc, RuntimeError):
        return "evaluation error (no such function for these arguments, or a failed conversion)"
    return "evaluation error"


def _type_name(value: Any) -> str:
    if value is None:
        return "null"
    names = {int: "an int", float: "a double", str: "a string", bytes: "bytes"}
    names |= {list: "a list", dict: "a map"}
    return names.get(type(value), "another type")


def _parser_message(message: str) -> str:
    """The parser's first error, its position and complaint, without the source
    lines it echoes (``| ...``) or the tokens it quotes."""
    for line in message.splitlines():
        _, found, rest = line.partition("ERROR: <input>:")
        if found:
            position, _, complaint = rest.partition(": ")
            complaint = complaint.split(" at: ", 1)[0]
            if complaint.startswith("Syntax error: mismatched input "):
                _, expecting, wanted = complaint.rpartition(" expecting ")
                complaint = "Syntax error: unexpected input" + (
                    f", expecting {wanted}" if expecting else ""
                )
            return f"{position}: {complaint}"[:_PARSER_MESSAGE_LIMIT]
    return "syntax error"


@dataclass(frozen=True)
class _Measured:
    """What an object's estimate needs: its JSON values (a string counting one more
    per ``STRING_UNIT`` characters), its longest list or map, and its ``weight``, what
    measuring and converting it costs per ``OBJECT_UNITS``: its values and map keys.
    When measuring stopped early, so far (the weight is then over the bound)."""

    values: int
    width: int
    weight: int


# Built once (a ``str | bytes`` union is built anew at each use); scalars are told
# apart first, and a dict before the slower ``Mapping`` check.
_SCALARS = frozenset({int, float, bool, type(None)})
_STRINGS = (str, bytes)
_LISTS = (list, tuple)
_MAPS = (dict, Mapping)


def _measure(obj: Any, most: int | None = None) -> _Measured:
    """``obj`` measured, stopping as soon as its weight passes ``most`` (the rest is
    left unmeasured: a weight over ``most`` says only that it is too large)."""
    values = width = keys = 0
    stack = [obj]
    while stack:
        if most is not None and values + keys > most:
            break
        value = stack.pop()
        values += 1
        if type(value) in _SCALARS:
            continue
        if isinstance(value, _STRINGS):
            values += len(value) // STRING_UNIT
        elif isinstance(value, _LISTS):
            width = max(width, len(value))
            stack.extend(value)
        elif isinstance(value, _MAPS):
            width = max(width, len(value))
            keys += len(value)
            stack.extend(value.values())
    return _Measured(values, width, values + keys)


# Tokens: what the cost estimate needs, read as CEL's grammar reads them.


class _Unreadable(Exception):
    """The tokens do not read the expression as the compiler does."""


# One token at a time, as CEL's lexer reads them (ASCII only outside strings and
# comments): whitespace and ``//`` comments (to the end of the line: only ``\n`` ends
# one), a string's opening (raw ``r``, bytes ``b``, triple quotes), identifiers,
# numbers (``1.all(..)`` is ``1`` ``.`` ``all``) and punctuation.
_LEXEME = re.compile(
    r"(?P<skip>[ \t\n\r\f]+|//[^\n]*)"
    r"""|(?P<quote>(?:[bB][rR]?|[rR])?(?:\"\"\"|'''|"|'))"""
    r"|(?P<word>[A-Za-z_][A-Za-z0-9_]*)"
    r"|(?P<number>0[xX][0-9a-fA-F]+[uU]?|[0-9]*\.[0-9]+(?:[eE][+-]?[0-9]+)?"
    r"|[0-9]+(?:[eE][+-]?[0-9]+|[uU])?)"
    r"|(?P<punctuation>[()\[\]{},.+\-*/%!<>=&|?:])",
    re.ASCII,
)
_PUNCTUATION = "()[]{},.+-*/%!<>=&|?:"
_CLOSING = {")": "(", "]": "[", "}": "{"}
# Every macro name, wherever written (in strings, comments and longer names too):
# what the compiler is asked about (``_compiler_agrees``).
_MACRO_NAME = re.compile("|".join(sorted(MACROS, key=len, reverse=True)))
_MARK = "Q"  # in the names macro names are renamed to: never part of a macro name


def _tokens(source: str) -> Iterator[tuple[int, str]]:
    """(offset, token): identifiers, numbers (``0``), punctuation (one character
    each) and, for each string literal, ``'``. The source has already compiled: a
    character the grammar does not allow there is ``_Unreadable``."""
    i = 0
    while i < len(source):
        match = _LEXEME.match(source, i)
        if match is None:
            raise _Unreadable
        kind, text, i = match.lastgroup, match.group(), match.end()
        if kind == "quote":
            prefix = text.rstrip("'\"")
            i = _skip_string(source, i, text[len(prefix) :], raw="r" in prefix.lower())
            yield match.start(), "'"
        elif kind == "number":
            yield match.start(), "0"
        elif kind != "skip":
            yield match.start(), text


def _skip_string(source: str, start: int, delimiter: str, *, raw: bool) -> int:
    """The index just past the literal whose contents begin at ``start``."""
    i = start
    while i < len(source):
        if not raw and source[i] == "\\":
            i += 2
        elif source.startswith(delimiter, i):
            return i + len(delimiter)
        else:
            i += 1
    raise _Unreadable


@dataclass(frozen=True)
class _Site:
    """A comprehension macro call: the offsets of its name, its '(' and its ')'."""

    name: int
    opening: int
    closing: int


@dataclass
class _Open:
    """A bracket not closed yet: which, where, and for a '[' its commas so far."""

    bracket: str
    offset: int
    macro: int  # the offset of the macro name this '(' follows, or -1
    commas: int = 0


@dataclass(frozen=True)
class _Shape:
    depth: int
    sites: tuple[_Site, ...]
    ops: int
    concatenations: int
    literal_width: int
    bound: frozenset[str]

    @property
    def comprehensions(self) -> int:
        return len(self.sites)

    @classmethod
    def of(cls, tokens: Iterator[tuple[int, str]]) -> _Shape:
        read = list(tokens)
        words = [token for _, token in read]
        depth = ops = concatenations = literal_width = 0
        bound: set[str] = set()
        sites: list[_Site] = []
        stack: list[_Open] = []
        for n, (offset, token) in enumerate(read):
            after = words[n + 1] if n + 1 < len(words) else ""
            if token in MACROS and after == "(" and n + 2 < len(words):
                bound.add(words[n + 2])
            if token in ("(", "[", "{"):
                macro = read[n - 1][0] if token == "(" and n and words[n - 1] in MACROS else -1
                stack.append(_Open(token, offset, macro))
                depth = max(depth, sum(1 for opened in stack if opened.macro >= 0))
            elif token in _CLOSING:
                opened = _close(stack, token)
                if opened.bracket == "[":
                    literal_width = max(literal_width, opened.commas + 1)
                if opened.macro >= 0:
                    sites.append(_Site(opened.macro, opened.offset, offset))
            elif token == "," and stack:
                stack[-1].commas += 1
            concatenations += token == "+"
            ops += (token in _PUNCTUATION and token not in ",)]}") or after == "("
        if stack:
            raise _Unreadable
        return cls(depth, tuple(sites), ops, concatenations, literal_width, frozenset(bound))


def _close(stack: list[_Open], bracket: str) -> _Open:
    if not stack or stack[-1].bracket != _CLOSING[bracket]:
        raise _Unreadable
    return stack.pop()


def _compiler_agrees(source: str, shape: _Shape) -> bool:
    """Whether the compiler reads the comprehensions where the tokens do. A probe is
    compiled: every macro name written anywhere (in strings and comments too) renamed
    to a name of its own that is no macro, and each call's arguments, as the tokens
    read them, made one list (``x.all(v, p)`` becomes ``x.aQ0Q([v, p])``). It must
    compile (else a bracket closes elsewhere than the tokens say), no macro name may
    be left, and the names it calls must be exactly those at the tokens' calls."""
    if _MACRO_NAME.search(source) is None:
        return True  # no comprehension, for the tokens and for the compiler
    import cel  # noqa: PLC0415 - loaded by compile_expression already

    edits = [(site.opening + 1, 0, site.opening + 1, "[") for site in shape.sites]
    edits += [(site.closing, 0, site.closing, "]") for site in shape.sites]
    renamed: dict[str, int] = {}
    for match in _MACRO_NAME.finditer(source):
        # The first letter stays: it may end an escape sequence in a string ("\a").
        name = f"{match.group()[0]}{_MARK}{len(renamed)}{_MARK}"
        renamed[name] = match.start()
        edits.append((match.start(), 1, match.end(), name))
    pieces, at = [], 0
    for start, _, end, text in sorted(edits):
        pieces += [source[at:start], text]
        at = end
    probe = "".join([*pieces, source[at:]])
    if _MACRO_NAME.search(probe):
        return False
    try:
        called = cel.compile(probe).functions()
    except Exception:  # the binding raises ValueError; any failure is the same to us
        return False
    return {renamed[name] for name in called if name in renamed} == {
        site.name for site in shape.sites
    }
