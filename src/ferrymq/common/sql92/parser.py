"""RocketMQ's selector grammar (SelectorParser.jj), by recursive descent, with the checks its
expression factories make while building (ComparisonExpression.create*, ConstantExpression).

One difference, on purpose: RocketMQ stops reading once an expression is complete and ignores
whatever follows (`a > 1 b` reads as `a > 1`); here anything after the expression is refused,
so no selector means something other than what it says. Everything accepted here RocketMQ
accepts too, with the same meaning."""

from __future__ import annotations

import math

from .errors import SelectorError
from .nodes import (
    BOOLEANS,
    CONSTANTS,
    And,
    BoolCast,
    BoolConst,
    BoolExpr,
    Compare,
    CompareOp,
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
    to_sql,
)
from .tokens import Kind, Token, string_value, tokenize
from .values import INT_MAX, INT_MIN, LONG_MAX, EvalError, java_compare

_DOUBLE_MIN = 5e-324  # Java's Double.MIN_VALUE
_ORDERING = (">", ">=", "<", "<=")
_MATCHES = ("CONTAINS", "STARTSWITH", "ENDSWITH")


def parse(text: str) -> BoolExpr:
    """The tree of `text`; SelectorError names what is wrong and where."""
    return _Parser(text).selector()


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens = tokenize(text)
        self.i = 0

    # --- token helpers -----------------------------------------------------------------------
    @property
    def tok(self) -> Token:
        return self.tokens[self.i]

    def peek(self, ahead: int = 1) -> Token:
        return self.tokens[min(self.i + ahead, len(self.tokens) - 1)]

    def at(self, text: str, ahead: int = 0) -> bool:
        t = self.peek(ahead) if ahead else self.tok
        return t.kind in (Kind.KEYWORD, Kind.OP) and t.text == text

    def take(self) -> Token:
        t = self.tok
        if t.kind is not Kind.EOF:
            self.i += 1
        return t

    def expect(self, text: str) -> Token:
        if not self.at(text):
            raise self.error(self.tok, f"expected {text!r}, found {self.tok.describe()}")
        return self.take()

    def error(self, at: Token, reason: str) -> SelectorError:
        return SelectorError(self.text, at.pos, reason)

    # --- grammar -----------------------------------------------------------------------------
    def selector(self) -> BoolExpr:
        if self.tok.kind is Kind.EOF:
            raise self.error(self.tok, "the expression is empty")
        start = self.tok
        e = self.or_expr()
        rest = self.tokens[self.i]
        if rest.kind is not Kind.EOF:
            extra = ""
            if self.at("-") and self.at("-", 1) and self.peek().pos == rest.pos + 1:
                extra = " (a '--' comment must end with a line break)"
            raise self.error(rest, f"unexpected {rest.describe()} after a complete expression{extra}")
        return self.as_bool(e, start)

    def or_expr(self) -> Expr:
        start = self.tok
        left = self.and_expr()
        while self.at("OR"):
            op = self.take()
            right_start = self.tok
            right = self.and_expr()
            left = Or(self.as_bool(left, start, op), self.as_bool(right, right_start, op))
        return left

    def and_expr(self) -> Expr:
        start = self.tok
        left = self.equality()
        while self.at("AND"):
            op = self.take()
            right_start = self.tok
            right = self.equality()
            left = And(self.as_bool(left, start, op), self.as_bool(right, right_start, op))
        return left

    def equality(self) -> Expr:
        left = self.comparison()
        while True:
            t = self.tok
            if self.at("=") or self.at("<>"):
                self.take()
                right = self.comparison()
                eq = self.equal(left, right, t)
                left = eq if t.text == "=" else Not(eq)
            elif self.at("IS"):
                self.take()
                if self.at("NULL"):
                    self.take()
                    left = IsNull(left)
                else:
                    self.expect("NOT")
                    self.expect("NULL")
                    left = Not(IsNull(left))
            else:
                return left

    def comparison(self) -> Expr:
        left = self.unary()
        while True:
            t = self.tok
            if t.kind is Kind.OP and t.text in _ORDERING:
                self.take()
                left = self.ordering(t.text, left, self.unary(), t)  # type: ignore[arg-type]
                continue
            negated = self.at("NOT") and self.peek().kind is Kind.KEYWORD and \
                self.peek().text in (*_MATCHES, "BETWEEN", "IN")
            if negated:
                self.take()
            word = self.tok
            if word.kind is not Kind.KEYWORD:
                return left
            if word.text in _MATCHES:
                self.take()
                left = Match(word.text, left, self.string(), negated)  # type: ignore[arg-type]
            elif word.text == "BETWEEN":
                self.take()
                low = self.unary()
                self.expect("AND")
                high = self.unary()
                left = self.between(left, low, high, negated, word)
            elif word.text == "IN":
                self.take()
                left = self.in_list(left, negated, word)
            else:
                return left

    def unary(self) -> Expr:
        t = self.tok
        if self.at("+"):
            self.take()
            return self.unary()
        if self.at("-"):
            self.take()
            return Neg(self.unary())
        if self.at("NOT"):
            self.take()
            start = self.tok
            return Not(self.as_bool(self.unary(), start, t))
        return self.primary()

    def primary(self) -> Expr:
        t = self.tok
        if t.kind is Kind.STRING:
            self.take()
            return StrConst(string_value(t))
        if t.kind is Kind.DECIMAL:
            self.take()
            return self.decimal(t)
        if t.kind is Kind.FLOAT:
            self.take()
            return self.float(t)
        if t.kind is Kind.ID:
            self.take()
            return Prop(t.text)
        if t.kind is Kind.KEYWORD and t.text in ("TRUE", "FALSE", "NULL"):
            self.take()
            return BoolConst(None if t.text == "NULL" else t.text == "TRUE")
        if self.at("("):
            self.take()
            e = self.or_expr()
            self.expect(")")
            return e
        raise self.error(t, f"expected a value, a property name or '(', found {t.describe()}")

    def string(self) -> str:
        t = self.tok
        if t.kind is not Kind.STRING:
            raise self.error(t, f"expected a string literal ('...'), found {t.describe()}")
        self.take()
        return string_value(t)

    def in_list(self, left: Expr, negated: bool, at: Token) -> In:
        if not isinstance(left, Prop):
            raise self.error(at, f"IN needs a property on its left, not {to_sql(left)}")
        self.expect("(")
        values = [self.string()]
        while self.at(","):
            self.take()
            values.append(self.string())
        self.expect(")")
        return In(left, tuple(values), negated)

    # --- literals (ConstantExpression.createFromDecimal / createFloat) -------------------------
    def decimal(self, t: Token) -> IntConst:
        value = int(t.text.rstrip("lL"))
        if value > LONG_MAX:
            raise self.error(t, f"{t.text} does not fit a 64-bit integer")
        return IntConst(value, not INT_MIN <= value <= INT_MAX)

    def float(self, t: Token) -> FloatConst:
        value = float(t.text)
        if math.isinf(value):
            raise self.error(t, f"{t.text} is greater than the largest double")
        if value < _DOUBLE_MIN:
            # RocketMQ refuses a float literal below Double.MIN_VALUE, 0.0 included; an
            # integer literal (0) compares the same way.
            raise self.error(t, f"{t.text} is less than 4.9E-324 (RocketMQ refuses it; write 0)")
        return FloatConst(value)

    # --- the checks of RocketMQ's expression factories ----------------------------------------
    def as_bool(self, e: Expr, at: Token, op: Token | None = None) -> BoolExpr:
        if isinstance(e, BOOLEANS):
            return e
        if isinstance(e, Prop):
            return BoolCast(e)
        where = f" ({op.text} needs conditions)" if op is not None else ""
        raise self.error(at, f"{to_sql(e)} is not a condition{where}")

    def equal(self, left: Expr, right: Expr, at: Token) -> Compare:
        for side in (left, right):
            if isinstance(side, BoolConst) and side.value is None:
                raise self.error(at, "NULL cannot be compared with '=' or '<>'; use IS NULL or IS NOT NULL")
        if isinstance(left, BoolConst) and isinstance(right, CONSTANTS) and not isinstance(right, BoolConst):
            raise self.error(at, f"{to_sql(left)} cannot be compared with {to_sql(right)}")
        return Compare("=", left, right)

    def ordering(self, op: CompareOp, left: Expr, right: Expr, at: Token) -> Compare:
        for side in (left, right):
            numeric = isinstance(side, (IntConst, FloatConst))
            if (isinstance(side, CONSTANTS) and not numeric) or isinstance(side, BOOLEANS):
                raise self.error(at, f"{to_sql(side)} cannot be compared with {op!r} (only numbers can)")
        return Compare(op, left, right)

    def between(self, value: Expr, low: Expr, high: Expr, negated: bool, at: Token) -> BoolExpr:
        if negated:
            return Or(self.ordering("<", value, low, at), self.ordering(">", value, high, at))
        if isinstance(low, CONSTANTS) and isinstance(high, CONSTANTS):
            lo, hi = low.value, high.value
            if lo is None or hi is None:
                raise self.error(at, "the bounds of BETWEEN cannot be NULL")
            try:
                ordered = java_compare(hi, lo) >= 0
            except EvalError:
                ordered = False
            if not ordered:
                raise self.error(at, f"the lower bound of BETWEEN ({to_sql(low)}) must not be "
                                     f"greater than the upper bound ({to_sql(high)})")
        return And(self.ordering(">=", value, low, at), self.ordering("<=", value, high, at))
