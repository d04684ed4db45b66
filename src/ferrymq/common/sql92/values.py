"""Java's value rules as RocketMQ's ComparisonExpression applies them.

Values are None (a missing property, NULL), str (every property), bool, int (Java Integer),
JLong (Java Long) and float (Java Double). A property compared with a number is converted
with the number's own parser (Integer.valueOf, Long.valueOf, Double.valueOf); when it does
not parse, RocketMQ's comparison throws, and the broker then does not deliver the message:
EvalError carries that here."""

from __future__ import annotations

import math
import re
from typing import TypeAlias

from ..errors import FerryMQError

INT_MIN, INT_MAX = -(1 << 31), (1 << 31) - 1
LONG_MIN, LONG_MAX = -(1 << 63), (1 << 63) - 1


class JLong(int):
    """A Java Long (a plain int is a Java Integer)."""

    __slots__ = ()

    def __neg__(self) -> JLong:
        return JLong(-int(self))


Value: TypeAlias = str | bool | int | float | None


class EvalError(FerryMQError):
    """Evaluating a selector failed (a conversion Java would refuse): the message does not match."""


_INTEGER = re.compile(r"[+-]?\d+")  # Character.digit(c, 10) takes any Unicode decimal digit
_DECIMAL = re.compile(r"([+-]?)(NaN|Infinity|(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?[fFdD]?)")
_HEX = re.compile(r"([+-]?)0[xX]([0-9a-fA-F]+\.?|[0-9a-fA-F]*\.[0-9a-fA-F]+)[pP]([+-]?[0-9]+)[fFdD]?")


def parse_int(text: str, lo: int = INT_MIN, hi: int = INT_MAX) -> int:
    """Integer.valueOf (or, with Long's bounds, Long.valueOf)."""
    if _INTEGER.fullmatch(text) is None:
        raise EvalError(f"{text!r} is not an integer")
    value = int(text)
    if not lo <= value <= hi:
        raise EvalError(f"{text!r} is out of range")
    return value


def parse_long(text: str) -> JLong:
    return JLong(parse_int(text, LONG_MIN, LONG_MAX))


def _java_trim(text: str) -> str:
    """String.trim: every character up to U+0020 counts as space, and nothing else does."""
    start, end = 0, len(text)
    while start < end and text[start] <= " ":
        start += 1
    while end > start and text[end - 1] <= " ":
        end -= 1
    return text[start:end]


def parse_double(text: str) -> float:
    """Double.valueOf: Java's float syntax, NaN and Infinity (case-sensitive), hex floats and
    the f/d suffixes."""
    s = _java_trim(text)
    m = _DECIMAL.fullmatch(s)
    if m is not None:
        sign, body = m.group(1), m.group(2)
        if body == "NaN":
            return math.nan
        if body == "Infinity":
            return -math.inf if sign == "-" else math.inf
        if body[-1] in "fFdD":
            body = body[:-1]
        return float(sign + body)
    m = _HEX.fullmatch(s)
    if m is not None:
        sign, mantissa, exponent = m.groups()
        try:
            return float.fromhex(f"{sign}0x{mantissa}p{exponent}")
        except OverflowError:
            return -math.inf if sign == "-" else math.inf
    raise EvalError(f"{text!r} is not a number")


def parse_bool(text: str) -> bool:
    """Boolean.valueOf: 'true' in any case, anything else is false."""
    return text.lower() == "true"


def compare_double(a: float, b: float) -> int:
    """Double.compare: NaN above everything (and equal to itself), -0.0 below 0.0."""
    if a < b:
        return -1
    if a > b:
        return 1
    a_nan, b_nan = a != a, b != b
    if a_nan or b_nan:
        return int(a_nan) - int(b_nan)
    sa, sb = math.copysign(1.0, a), math.copysign(1.0, b)
    return (sa > sb) - (sa < sb)


def _cmp(a: int | str | bool, b: int | str | bool) -> int:
    return (a > b) - (a < b)  # type: ignore[operator]


def java_compare(lv: Value, rv: Value) -> int:
    """ComparisonExpression.__compare with string conversion on (as the parser sets it):
    values of different types are converted towards the other side, and a pair Java cannot
    compare answers -1. Neither side may be None."""
    lt, rt = type(lv), type(rv)
    if lt is rt:
        if lt is float:
            return compare_double(lv, rv)  # type: ignore[arg-type]
        return _cmp(lv, rv)  # type: ignore[arg-type]
    if lt is bool:
        if rt is str:
            # Java casts the Boolean to String here and fails (ClassCastException).
            raise EvalError("a boolean cannot be compared with a string")
        return -1
    if lt is int or lt is JLong:
        if rt is int or rt is JLong:
            return _cmp(lv, rv)  # type: ignore[arg-type]
        if rt is float:
            return compare_double(float(lv), rv)  # type: ignore[arg-type]
        if rt is str:
            right = parse_int(rv) if lt is int else parse_long(rv)  # type: ignore[arg-type]
            return _cmp(lv, right)  # type: ignore[arg-type]
        return -1
    if lt is float:
        if rt is int or rt is JLong:
            return compare_double(lv, float(rv))  # type: ignore[arg-type]
        if rt is str:
            return compare_double(lv, parse_double(rv))  # type: ignore[arg-type]
        return -1
    if lt is str:
        if rt is bool:
            return _cmp(parse_bool(lv), rv)  # type: ignore[arg-type]
        if rt is int:
            return _cmp(parse_int(lv), rv)  # type: ignore[arg-type]
        if rt is JLong:
            return _cmp(parse_long(lv), rv)  # type: ignore[arg-type]
        if rt is float:
            return compare_double(parse_double(lv), rv)  # type: ignore[arg-type]
    return -1
