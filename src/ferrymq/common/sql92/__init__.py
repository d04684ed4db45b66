"""SQL92 message selectors: RocketMQ's `MessageSelector.bySql` language, on message properties.

    selector = compile_selector("region = 'EU' AND amount > 100")
    selector.matches({"region": "EU", "amount": "250"})  # True

The grammar, the checks at parse time and the evaluation follow Apache RocketMQ's
org.apache.rocketmq.filter package; docs/filtering.md describes both."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache

from .errors import SelectorError
from .evaluate import Fn, compile_expr
from .nodes import BoolExpr, to_sql
from .parser import parse
from .values import EvalError

__all__ = ["Selector", "SelectorError", "compile_selector", "parse", "to_sql"]


@dataclass(frozen=True, slots=True)
class Selector:
    expression: str
    tree: BoolExpr
    _run: Fn = field(repr=False, compare=False)

    def evaluate(self, properties: Mapping[str, str]) -> bool | None:
        """RocketMQ's answer for a message: True, False or None (unknown: a property is
        missing). Raises EvalError where RocketMQ's evaluation throws."""
        result = self._run(properties)
        return result if result is None else bool(result)

    def matches(self, properties: Mapping[str, str]) -> bool:
        """Whether the broker delivers a message with these properties: only a True result
        does; unknown and a failed evaluation do not."""
        try:
            return self._run(properties) is True
        except EvalError:
            return False


@lru_cache(maxsize=256)
def compile_selector(expression: str) -> Selector:
    """Parse and compile `expression`; raises SelectorError when it is invalid. Cached: a
    consumer sends its selector with every pull."""
    tree = parse(expression)
    return Selector(expression, tree, compile_expr(tree))
