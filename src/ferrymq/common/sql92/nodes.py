"""The typed tree of a parsed selector, built as RocketMQ's SelectorParser builds its
expression objects: `a BETWEEN 1 AND 2` is (a >= 1) AND (a <= 2), `a <> 1` is NOT (a = 1),
`a IS NOT NULL` is NOT (a IS NULL). So the evaluator needs no rule RocketMQ does not have.

`to_sql` writes a tree back as a selector that parses to the same tree."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, TypeAlias

CompareOp = Literal["=", ">", ">=", "<", "<="]
MatchOp = Literal["CONTAINS", "STARTSWITH", "ENDSWITH"]


@dataclass(frozen=True, slots=True)
class StrConst:
    value: str


@dataclass(frozen=True, slots=True)
class IntConst:
    """A decimal literal; `long` when it does not fit Java's int (it then converts a
    property with Long.valueOf rather than Integer.valueOf)."""

    value: int
    long: bool = False


@dataclass(frozen=True, slots=True)
class FloatConst:
    value: float


@dataclass(frozen=True, slots=True)
class BoolConst:
    """TRUE, FALSE or NULL (None): constants that are also boolean expressions."""

    value: bool | None


@dataclass(frozen=True, slots=True)
class Prop:
    name: str


@dataclass(frozen=True, slots=True)
class Neg:
    operand: Expr


@dataclass(frozen=True, slots=True)
class Compare:
    op: CompareOp
    left: Expr
    right: Expr


@dataclass(frozen=True, slots=True)
class IsNull:
    operand: Expr


@dataclass(frozen=True, slots=True)
class In:
    prop: Prop
    values: tuple[str, ...]
    negated: bool = False


@dataclass(frozen=True, slots=True)
class Match:
    op: MatchOp
    operand: Expr
    search: str
    negated: bool = False


@dataclass(frozen=True, slots=True)
class BoolCast:
    """A property standing where a condition is expected (`a AND b`)."""

    prop: Prop


@dataclass(frozen=True, slots=True)
class Not:
    operand: BoolExpr


@dataclass(frozen=True, slots=True)
class And:
    left: BoolExpr
    right: BoolExpr


@dataclass(frozen=True, slots=True)
class Or:
    left: BoolExpr
    right: BoolExpr


Const: TypeAlias = StrConst | IntConst | FloatConst | BoolConst
BoolExpr: TypeAlias = Compare | IsNull | In | Match | BoolCast | Not | And | Or | BoolConst
Expr: TypeAlias = StrConst | IntConst | FloatConst | Prop | Neg | BoolExpr

CONSTANTS = (StrConst, IntConst, FloatConst, BoolConst)
BOOLEANS = (Compare, IsNull, In, Match, BoolCast, Not, And, Or, BoolConst)


def quote(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def to_sql(e: Expr) -> str:
    """Every compound part in parentheses, so precedence never changes the tree."""
    match e:
        case StrConst(v):
            return quote(v)
        case IntConst(v, _):
            return str(v)
        case FloatConst(v):
            return repr(v)  # always has '.' or 'e', so it reads back as a float literal
        case BoolConst(v):
            return "NULL" if v is None else "TRUE" if v else "FALSE"
        case Prop(name):
            return name
        case Neg(x):
            return f"(- {to_sql(x)})"  # the space keeps '- -' from reading as a comment
        case Compare(op, left, right):
            return f"({to_sql(left)} {op} {to_sql(right)})"
        case IsNull(x):
            return f"({to_sql(x)} IS NULL)"
        case In(prop, values, negated):
            items = ", ".join(quote(v) for v in values)
            return f"({prop.name} {'NOT IN' if negated else 'IN'} ({items}))"
        case Match(op, x, search, negated):
            return f"({to_sql(x)} {'NOT ' if negated else ''}{op} {quote(search)})"
        case BoolCast(prop):
            return prop.name
        case Not(x):
            return f"(NOT {to_sql(x)})"
        case And(left, right):
            return f"({to_sql(left)} AND {to_sql(right)})"
        case Or(left, right):
            return f"({to_sql(left)} OR {to_sql(right)})"
    raise TypeError(f"not a selector node: {e!r}")
