"""Evaluating a selector against a message's properties, with RocketMQ's three-valued logic
(a missing property is NULL; NULL AND FALSE is FALSE, NULL OR TRUE is TRUE) and Java's
conversions (values.py). The tree is compiled once into nested closures: the broker runs
them for every stored message a filtered pull reads."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from .nodes import (
    And,
    BoolCast,
    BoolConst,
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
from .values import JLong, Value, compare_double, java_compare, parse_double

Props = Mapping[str, str]
Fn = Callable[[Props], Value]

_ORDER: dict[str, Callable[[int], bool]] = {
    ">": lambda c: c > 0,
    ">=": lambda c: c >= 0,
    "<": lambda c: c < 0,
    "<=": lambda c: c <= 0,
}


def constant(e: Expr) -> tuple[bool, Value]:
    """(True, value) when `e` has the same value for every message: literals, and negations,
    which RocketMQ computes at each evaluation but which never depend on the message."""
    match e:
        case StrConst(v):
            return True, v
        case IntConst(v, long):
            return True, JLong(v) if long else v
        case FloatConst(v):
            return True, v
        case BoolConst(v):
            return True, v
        case Neg(x):
            known, v = constant(x)
            return known, _negate(v) if known else None
    return False, None


def compile_expr(e: Expr) -> Fn:
    known, value = constant(e)
    if known:
        return lambda _p: value
    match e:
        case Prop(name):
            return lambda p: p.get(name)
        case Neg(x):
            fx = compile_expr(x)
            return lambda p: _negate(fx(p))
        case Compare("=", left, right):
            return _equal(compile_expr(left), compile_expr(right))
        case Compare(op, left, right):
            return _ordering(_ORDER[op], compile_expr(left), compile_expr(right))
        case IsNull(x):
            fx = compile_expr(x)
            return lambda p: fx(p) is None
        case In(Prop(name), values, negated):
            return _in(name, frozenset(values), negated)
        case Match(op, x, search, negated):
            return _match(op, compile_expr(x), search, negated)
        case BoolCast(Prop(name)):
            return lambda p: None if p.get(name) is None else False  # properties are never booleans
        case Not(x):
            return _not(compile_expr(x))
        case And(left, right):
            return _and(compile_expr(left), compile_expr(right))
        case Or(left, right):
            return _or(compile_expr(left), compile_expr(right))
    raise TypeError(f"not a selector node: {e!r}")


def _negate(v: Value) -> Value:
    if type(v) is int or type(v) is JLong or type(v) is float:
        return -v  # type: ignore[operator]
    return None  # strings, booleans and NULL do not negate


def _equal(fl: Fn, fr: Fn) -> Fn:
    def run(p: Props) -> Value:
        lv, rv = fl(p), fr(p)
        if lv is None or rv is None:
            if lv is None and rv is None:
                return True
            return None if lv is None else False
        return java_compare(lv, rv) == 0

    return run


def _ordering(test: Callable[[int], bool], fl: Fn, fr: Fn) -> Fn:
    def run(p: Props) -> Value:
        lv = fl(p)
        if lv is None:
            return None
        rv = fr(p)
        if rv is None:
            return None
        if type(lv) is str and type(rv) is str:
            return test(compare_double(parse_double(lv), parse_double(rv)))
        return test(java_compare(lv, rv))

    return run


def _in(name: str, values: frozenset[str], negated: bool) -> Fn:
    def run(p: Props) -> Value:
        v = p.get(name)
        if v is None:
            return None
        return (v in values) != negated

    return run


def _match(op: str, fx: Fn, search: str, negated: bool) -> Fn:
    if not search:
        return lambda _p: False
    test: Callable[[str], bool] = {
        "CONTAINS": lambda s: search in s,
        "STARTSWITH": lambda s: s.startswith(search),
        "ENDSWITH": lambda s: s.endswith(search),
    }[op]

    def run(p: Props) -> Value:
        v = fx(p)
        if type(v) is not str:
            return False  # missing, or not a string: false either way, even negated
        return test(v) != negated

    return run


def _not(fx: Fn) -> Fn:
    def run(p: Props) -> Value:
        v = fx(p)
        return None if v is None else not v

    return run


def _and(fl: Fn, fr: Fn) -> Fn:
    def run(p: Props) -> Value:
        lv = fl(p)
        if lv is False:
            return False
        rv = fr(p)
        if rv is False:
            return False
        return None if lv is None or rv is None else True

    return run


def _or(fl: Fn, fr: Fn) -> Fn:
    def run(p: Props) -> Value:
        lv = fl(p)
        if lv is True:
            return True
        rv = fr(p)
        if rv is True:
            return True
        return None if lv is None or rv is None else False

    return run
