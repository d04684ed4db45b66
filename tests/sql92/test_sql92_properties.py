"""Property tests of the SQL92 selector tokenizer, parser and evaluator: generated trees
written out and read back are the same tree, and no input (arbitrary text, shuffled tokens,
any property values) makes them fail other than with SelectorError."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from ferrymq.common.sql92 import SelectorError, compile_selector, parse, to_sql
from ferrymq.common.sql92.nodes import (
    And,
    BoolCast,
    BoolConst,
    BoolExpr,
    Compare,
    Expr,
    FloatConst,
    In,
    IntConst,
    IsNull,
    Match,
    Neg,
    Not,
    Or,
    Prop,
    StrConst,
)
from ferrymq.common.sql92.tokens import KEYWORDS, Kind, tokenize
from ferrymq.common.sql92.values import INT_MAX, LONG_MAX

names = st.from_regex(r"[A-Za-z_$][A-Za-z0-9_$]{0,8}", fullmatch=True).filter(
    lambda n: n.upper() not in KEYWORDS)
props = st.builds(Prop, names)
texts = st.text(max_size=8)
ints = st.integers(0, LONG_MAX).map(lambda v: IntConst(v, v > INT_MAX))
floats = st.floats(min_value=5e-324, allow_infinity=False, allow_nan=False).map(FloatConst)
numbers = st.one_of(ints, floats)
signed_numbers = st.recursive(numbers, lambda inner: st.builds(Neg, inner), max_leaves=3)
# What may stand on either side of '>' (RocketMQ: numbers, properties, negations).
orderable = st.one_of(props, signed_numbers, st.builds(Neg, props))
values = st.one_of(orderable, st.builds(StrConst, texts))


def _comparisons(conditions: st.SearchStrategy[BoolExpr]) -> st.SearchStrategy[BoolExpr]:
    # A bare property becomes a condition (BoolCast) only where a condition is expected.
    # NULL is compared only with IS NULL.
    bools = conditions.filter(lambda b: not isinstance(b, BoolCast) and b != BoolConst(None))
    ordering = st.builds(Compare, st.sampled_from([">", ">=", "<", "<="]), orderable, orderable)
    eq_operands = st.one_of(values, bools, st.sampled_from([BoolConst(True), BoolConst(False)]))
    equal = st.builds(Compare, st.just("="), eq_operands, eq_operands).filter(
        lambda c: not (isinstance(c.left, BoolConst) and isinstance(c.right, (StrConst, IntConst, FloatConst))))
    return st.one_of(
        ordering,
        equal,
        st.builds(IsNull, st.one_of(values, bools)),
        st.builds(In, props, st.lists(texts, min_size=1, max_size=4).map(tuple), st.booleans()),
        st.builds(Match, st.sampled_from(["CONTAINS", "STARTSWITH", "ENDSWITH"]), st.one_of(values, bools),
                  texts, st.booleans()),
    )


leaves: st.SearchStrategy[BoolExpr] = st.one_of(
    st.builds(BoolCast, props), st.sampled_from([BoolConst(True), BoolConst(False), BoolConst(None)]))
trees: st.SearchStrategy[BoolExpr] = st.recursive(
    leaves,
    lambda inner: st.one_of(
        _comparisons(inner),
        st.builds(Not, inner),
        st.builds(And, inner, inner),
        st.builds(Or, inner, inner),
    ),
    max_leaves=12,
)


@settings(max_examples=400)
@given(trees)
def test_a_tree_written_out_reads_back_as_the_same_tree(tree: BoolExpr) -> None:
    text = to_sql(tree)
    assert parse(text) == tree, text


# Selectors as people write them: any keyword case, spacing and comments between tokens.
def _keyword(word: str) -> st.SearchStrategy[str]:
    return st.sampled_from([word, word.lower(), word.capitalize()])


gaps = st.sampled_from([" ", "  ", "\t", "\n", " /* note */ ", " -- note\n", "\r\n"])


@st.composite
def written(draw: st.DrawFn, depth: int = 0) -> str:
    gap = draw(gaps)
    name = to_sql(draw(props))
    kind = draw(st.integers(0, 7 if depth < 3 else 5))
    if kind == 0:
        return f"{name}{gap}{draw(st.sampled_from(['>', '>=', '<', '<=', '=', '<>']))}{gap}{to_sql(draw(numbers))}"
    if kind == 1:
        return f"{name}{gap}{draw(_keyword('NOT')) + gap if draw(st.booleans()) else ''}" \
               f"{draw(_keyword('BETWEEN'))}{gap}1{gap}{draw(_keyword('AND'))}{gap}{draw(st.integers(1, LONG_MAX))}"
    if kind == 2:
        items = ",".join(to_sql(StrConst(t)) for t in draw(st.lists(texts, min_size=1, max_size=3)))
        return f"{name}{gap}{draw(_keyword('IN'))}{gap}({items})"
    if kind == 3:
        return f"{name}{gap}{draw(_keyword('IS'))}{gap}{draw(_keyword('NOT')) + gap if draw(st.booleans()) else ''}" \
               f"{draw(_keyword('NULL'))}"
    if kind == 4:
        op = draw(st.sampled_from(["CONTAINS", "STARTSWITH", "ENDSWITH"]))
        return f"{name}{gap}{draw(_keyword(op))}{gap}{to_sql(StrConst(draw(texts)))}"
    if kind == 5:
        return f"{name}{gap}={gap}{to_sql(StrConst(draw(texts)))}"
    if kind == 6:
        return f"{draw(_keyword('NOT'))}{gap}({draw(written(depth + 1))})"
    op = draw(st.sampled_from(["AND", "OR"]))
    return f"({draw(written(depth + 1))}){gap}{draw(_keyword(op))}{gap}({draw(written(depth + 1))})"


@settings(max_examples=400)
@given(written())
def test_written_selectors_parse_and_their_canonical_form_reads_back_the_same(text: str) -> None:
    tree = parse(text)
    canonical = to_sql(tree)
    assert parse(canonical) == tree
    assert to_sql(parse(canonical)) == canonical


@settings(max_examples=300)
@given(written())
def test_tokens_sit_where_they_say_in_the_text(text: str) -> None:
    for t in tokenize(text):
        if t.kind is Kind.EOF:
            assert t.pos == len(text)
        else:
            assert text[t.pos : t.pos + len(t.text)].upper() == t.text.upper()


def _parses_or_refuses(text: str) -> None:
    try:
        tree = parse(text)
    except SelectorError as exc:
        assert exc.expression == text
        assert 0 <= exc.position <= len(text)
        assert str(exc.position) in str(exc)
        return
    assert parse(to_sql(tree)) == tree


@settings(max_examples=500)
@given(st.text(max_size=40))
def test_arbitrary_text_parses_or_raises_selector_error(text: str) -> None:
    _parses_or_refuses(text)


soup = st.lists(st.sampled_from([
    "a", "b", "TAGS", "AND", "or", "not", "BETWEEN", "in", "IS", "NULL", "true", "false", "contains",
    "startswith", "endswith", "(", ")", ",", "=", "<>", ">", ">=", "<", "<=", "+", "-", "0", "7", "1.5",
    "2147483648", "9223372036854775808", "0.0", "1e400", "'x'", "''", "'it''s'", "--", "/*", "*/", "\n",
    "'", "%", "0x1", "1L", ".5",
]), max_size=12).map(" ".join)


@settings(max_examples=800)
@given(soup)
def test_shuffled_tokens_parse_or_raise_selector_error(text: str) -> None:
    _parses_or_refuses(text)


property_values = st.one_of(texts, st.integers().map(str), st.floats().map(repr),
                            st.sampled_from(["true", "FALSE", "NaN", "-Infinity", " 5 ", "5d", "0x1p3", "", "٣"]))


@settings(max_examples=500)
@given(soup, st.dictionaries(st.sampled_from(["a", "b", "TAGS"]), property_values, max_size=3))
def test_evaluation_never_fails_where_a_selector_parses(text: str, properties: dict[str, str]) -> None:
    try:
        selector = compile_selector(text)
    except SelectorError:
        return
    assert selector.matches(properties) in (True, False)


@given(st.floats(min_value=5e-324, allow_infinity=False))
def test_float_literals_keep_their_value(value: float) -> None:
    tree = parse(f"a > {value!r}")
    assert isinstance(tree, Compare) and isinstance(tree.right, FloatConst)
    assert tree.right.value == value and not math.isnan(tree.right.value)


def _expr_size(e: Expr) -> int:
    return len(to_sql(e))


@given(trees)
def test_canonical_text_is_stable(tree: BoolExpr) -> None:
    assert to_sql(parse(to_sql(tree))) == to_sql(tree)
    assert _expr_size(tree) > 0
