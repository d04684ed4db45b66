"""Table tests mirroring Apache RocketMQ's filter tests (ParserTest, ExpressionTest), with
string property values (what a stored message carries), plus the Java conversion rules those
tests rely on. `None` in an expected column means RocketMQ's evaluation gives null: the
broker does not deliver the message."""

from __future__ import annotations

import pytest

from ferrymq.common.sql92 import SelectorError, compile_selector, parse
from ferrymq.common.sql92.nodes import And, Compare, IntConst, Not, Or, Prop
from ferrymq.common.sql92.values import EvalError

AND_EXPR = "a=3 and b<>4 And c>5 AND d<=4"
OR_EXPR = "a=3 or b<>4 Or c>5 OR d<=4"
IN_EXPR = "a in ('3', '4', '5')"
NOT_IN_EXPR = "a not in ('3', '4', '5')"


# --- ParserTest ------------------------------------------------------------------------------
@pytest.mark.parametrize("expr", [
    AND_EXPR, OR_EXPR, IN_EXPR, "(a not in ('6', '4', '5')) or (b in ('3', '4', '5'))",
    "(a between 2 and 10) AND (b not between 6 and 9)", "a is null", "a is not null",
    "a <= now", "a=3 and b contains 'xxx' and c not contains 'xxx'",
])
def test_valid_expressions_parse(expr: str) -> None:
    assert compile_selector(expr).tree is not None


@pytest.mark.parametrize(("expr", "position", "reason"), [
    ("a and between 2 and 10", 6, "expected a value"),
    ("a > 100000000000000000000000", 4, "does not fit a 64-bit integer"),
    ("a > 1" + "1" * 400 + "." + "1" * 400, 4, "greater than the largest double"),
    (" a between 10 and 0", 3, "lower bound of BETWEEN"),
    ("value contains x", 15, "expected a string literal"),
    ("value not contains 123", 19, "expected a string literal"),
    ("'axb' contains ", 15, "expected a string literal"),
    ("", 0, "empty"),
    ("a > 'x'", 2, "cannot be compared with '>'"),
    ("a > TRUE", 2, "cannot be compared"),
    ("a = NULL", 2, "use IS NULL"),
    ("TRUE = 5", 5, "cannot be compared with 5"),
    ("5", 0, "is not a condition"),
    ("'x' AND a", 0, "is not a condition"),
    ("NOT a > 1", 6, "cannot be compared"),
    ("(a > 1) IN ('x')", 8, "IN needs a property"),
    ("a between 1 and NULL", 2, "cannot be NULL"),
    ("a > 0.0", 4, "less than 4.9E-324"),
    ("a > 1 b", 6, "after a complete expression"),
    ("a > 1 -- comment", 6, "must end with a line break"),
    ("a = 'x", 4, "unterminated string"),
    ("a > 1 /* never closed", 6, "unterminated comment"),
    ("a ~ 1", 2, "unexpected character"),
    ("a IS NOT 5", 9, "expected 'NULL'"),
    ("(a > 1", 6, "expected ')'"),
])
def test_invalid_expressions_raise_with_position(expr: str, position: int, reason: str) -> None:
    with pytest.raises(SelectorError) as info:
        parse(expr)
    assert info.value.expression == expr
    assert info.value.position == position
    assert reason in info.value.reason


def test_equal_expressions_build_equal_trees() -> None:
    assert parse(AND_EXPR) == parse("a=3  and    b<>4 And c>5 AND d<=4")
    assert parse(AND_EXPR) != parse(OR_EXPR)


def test_the_tree_is_built_as_rocketmq_builds_it() -> None:
    a, one, two = Prop("a"), IntConst(1), IntConst(2)
    assert parse("a between 1 and 2") == And(Compare(">=", a, one), Compare("<=", a, two))
    assert parse("a not between 1 and 2") == Or(Compare("<", a, one), Compare(">", a, two))
    assert parse("a <> 1") == Not(Compare("=", a, one))
    assert parse("a > 2147483648") == Compare(">", a, IntConst(2147483648, long=True))
    assert parse("a > 5L") == Compare(">", a, IntConst(5))


def test_comments_and_case() -> None:
    assert parse("A > 1 /* c */ AnD -- note\n b < 2") == parse("A > 1 AND b < 2")
    assert parse("a > 1") != parse("A > 1")  # property names are case-sensitive


# --- ExpressionTest --------------------------------------------------------------------------
def ev(expr: str, **props: str) -> bool | None:
    return compile_selector(expr).evaluate(props)


@pytest.mark.parametrize(("expr", "props", "expected"), [
    # contains / startswith / endswith, and their NOT forms
    ("value contains 'x'", {"value": "axb"}, True),
    ("value startswith 'ax'", {"value": "axb"}, True),
    ("value endswith 'xb'", {"value": "axb"}, True),
    ("value not contains 'x'", {"value": "axb"}, False),
    ("value not startswith 'ax'", {"value": "axb"}, False),
    ("value not endswith 'xb'", {"value": "axb"}, False),
    ("value contains 'x'", {"value": "abb"}, False),
    ("value startswith 'x'", {"value": "abb"}, False),
    ("value endswith 'x'", {"value": "abb"}, False),
    ("value not contains 'x'", {"value": "abb"}, True),
    ("value not startswith 'x'", {"value": "abb"}, True),
    ("value not endswith 'x'", {"value": "abb"}, True),
    ("value contains ''", {"value": "axb"}, False),
    ("value startswith ''", {"value": "axb"}, False),
    ("value endswith ''", {"value": "axb"}, False),
    ("value not contains ''", {"value": "axb"}, False),
    ("value not startswith ''", {"value": "axb"}, False),
    ("value not endswith ''", {"value": "axb"}, False),
    ("value contains 'x'", {}, False),
    ("value not contains 'x'", {}, False),
    ("value not startswith 'x'", {}, False),
    ("value not endswith 'x'", {}, False),
    ("'axb' contains 'x'", {}, True),
    ("'axb' startswith 'ax'", {}, True),
    ("'axb' endswith 'xb'", {}, True),
    ("'axb' not contains 'x'", {}, False),
    ("'axb' not contains 'u'", {}, True),
    ("'axb' contains ''", {}, False),
    ("' ' contains ' '", {}, True),
    ("' ' not endswith ' '", {}, False),
    ("'axb' contains '.'", {}, False),
    ("'axb' not startswith '.'", {}, True),
    ("'s' contains '\\'", {}, False),
    ("5 contains '5'", {}, False),  # only strings contain anything
    ("a not in ('4', '4', '5') and b between 3 and 10 and c not contains 'axbc'",
     {"a": "3", "b": "3", "c": "axbdc"}, True),
    ("a not in ('4', '4', '5') and b between 3 and 10 and c not startswith 'axbc'",
     {"a": "3", "b": "3", "c": "axbdc"}, True),
    ("TAGS is not null and TAGS='''''tag'''''", {"TAGS": "''tag''"}, True),
    # numbers in strings
    ("a > 3.1E10", {"a": str(3.1415 * 10**10)}, True),
    ("a > 3.14", {"a": "3.1415"}, True),
    ("a > b", {"a": "10", "b": "20"}, False),
    ("a > b", {"a": "20", "b": "10"}, True),
    ("a=b", {"a": "3.14", "b": "3.14"}, True),
    ("a<>b", {"a": "3.14", "b": "3.14"}, False),
    ("a<>b", {"a": "3.14", "b": "3.141"}, True),
    ("a between up and low", {"a": "3.14"}, None),
    # null handling
    ("a is null OR a='hello'", {}, True),
    ("a is null OR a='hello'", {"a": "hello"}, True),
    ("a is null OR a='hello'", {"a": "abc"}, False),
    ("a=TRUE OR b=FALSE", {"a": "true", "b": "false"}, True),
    ("a=TRUE OR b=FALSE", {"a": "false", "b": "true"}, False),
    ("a is not null and a='hello'", {"a": "hello"}, True),
    ("a is not null and a='hello'", {}, False),
    (AND_EXPR, {"a": "3", "b": "5", "c": "6", "d": "1"}, True),
    (AND_EXPR, {"a": "4", "b": "5", "c": "6", "d": "1"}, False),
    (OR_EXPR, {"a": "3"}, True),
    (OR_EXPR, {"a": "4", "b": "5"}, True),
    (OR_EXPR, {"a": "4", "b": "4", "c": "6"}, True),
    (OR_EXPR, {"a": "4", "b": "4", "c": "3", "d": "2"}, True),
    (OR_EXPR, {"a": "4", "b": "4", "c": "3", "d": "10"}, False),
    (IN_EXPR, {"a": "3"}, True),
    (IN_EXPR, {"a": "5"}, True),
    (IN_EXPR, {"a": "8"}, False),
    (NOT_IN_EXPR, {"a": "8"}, True),
    (NOT_IN_EXPR, {"a": "4"}, False),
    ("a between 2 and 10", {"a": "2"}, True),
    ("a between 2 and 10", {"a": "10"}, True),
    ("a between 2 and 10", {"a": "1"}, False),
    ("a between 2 and 10", {"a": "11"}, False),
    ("a not between 2 and 10", {"a": "1"}, True),
    ("a not between 2 and 10", {"a": "3"}, False),
    ("a is null", {"abc": "2"}, True),
    ("a is null", {"a": "2"}, False),
    ("a is not null", {"a": "2"}, True),
    ("a is not null", {"abc": "2"}, False),
])
def test_rocketmq_expression_table(expr: str, props: dict[str, str], expected: bool | None) -> None:
    result = ev(expr, **props)
    if expected is None:
        assert result is None
    else:
        assert result is expected


@pytest.mark.parametrize(("expr", "props"), [
    # ExpressionTest.testEvaluate_stringCompare: a string that is not a number, compared as one
    ("key is not null and key between 0 and 100", {"key": "con"}),
    ("a between 0 and 100", {"a": "abc"}),
    ("a between up and low", {"a": "3.14", "up": "up", "low": "low"}),
])
def test_comparing_a_non_number_as_a_number_fails_and_the_message_does_not_match(
        expr: str, props: dict[str, str]) -> None:
    selector = compile_selector(expr)
    with pytest.raises(EvalError):
        selector.evaluate(props)
    assert selector.matches(props) is False


# --- the Java conversions (checked against RocketMQ's classes) -------------------------------
@pytest.mark.parametrize(("expr", "props", "matches"), [
    ("a > 5", {"a": "7"}, True),
    ("a > 5", {"a": "+7"}, True),
    ("a > 5", {"a": "5.5"}, False),         # Integer.valueOf("5.5") throws
    ("a > 5.0", {"a": "5.5"}, True),        # Double.valueOf
    ("a > 5", {"a": " 7"}, False),          # Integer.valueOf does not trim
    ("a > 5.0", {"a": " 7 "}, True),        # Double.valueOf does
    ("a > 5.0", {"a": "7d"}, True),         # and takes Java's suffixes
    ("a > 5.0", {"a": "0x1p3"}, True),      # and hex floats
    ("a > 5.0", {"a": "NaN"}, True),        # NaN sorts above everything, as in Double.compare
    ("a > 5.0", {"a": "nan"}, False),
    ("a > 5", {"a": "3000000000"}, False),  # does not fit the Integer the literal is
    ("a > 2147483648", {"a": "3000000000"}, True),
    ("a > 5", {"a": "٧"}, True),            # Character.digit takes any decimal digit
    ("a > 5", {"a": "1_000"}, False),
    ("a = 5", {"a": "5"}, True),
    ("a = 5", {"a": "05"}, True),
    ("a = '5'", {"a": "05"}, False),        # strings compare as strings
    ("a = 5.0", {"a": "5"}, True),
    ("a > -5", {"a": "-3"}, True),
    ("a = TRUE", {"a": "TrUe"}, True),
    ("a = FALSE", {"a": "yes"}, True),      # Boolean.valueOf: anything but 'true' is false
    ("a <> 'x'", {}, False),                # NULL, not TRUE
    ("NOT (a = 'x')", {}, False),
    ("NOT (a contains 'x')", {}, True),     # CONTAINS answers FALSE, not NULL, when missing
    ("a", {"a": "true"}, False),            # a property is never a boolean
    ("NOT a", {"a": "x"}, True),
    ("NOT a", {}, False),
    ("TRUE", {}, True),
    ("NULL", {}, False),
    ("a > 5 OR b = 'x'", {"a": "abc", "b": "x"}, False),  # the failed comparison fails it all
    ("b = 'x' OR a > 5", {"a": "abc", "b": "x"}, True),   # unless OR already has its answer
    ("a > 5 AND b = 'x'", {"a": "7"}, False),
    ("a > 5 OR b = 'x'", {"a": "7"}, True),
    ("-a = -5", {"a": "5"}, False),          # a string does not negate: NULL
    ("a between -5 and 5", {"a": "0"}, True),
])
def test_java_conversions(expr: str, props: dict[str, str], matches: bool) -> None:
    assert compile_selector(expr).matches(props) is matches
