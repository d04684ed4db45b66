"""A consumer's subscription to one topic: a tag expression ('*' or 'TagA || TagB') or an
SQL92 selector on message properties (MessageSelector.by_sql), which the broker evaluates."""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from typing import Any

from ...common.message import MessageExt
from ...common.names import java_string_hash
from ...common.sql92 import compile_selector

SUB_ALL = "*"
TAG, SQL92 = "TAG", "SQL92"
# Whitespace, comparison operators, parentheses and quotes: what a SQL92 filter has, never a tag.
_NOT_IN_TAGS = re.compile(r"[\s<>=!()'\"]")


@dataclass(frozen=True, slots=True)
class MessageSelector:
    """Which messages of a topic a consumer wants, as RocketMQ's MessageSelector:
    `MessageSelector.by_tag("TagA || TagB")` or `MessageSelector.by_sql("amount > 100")`.
    Both check their expression at once: an invalid one raises here (ValueError, or
    SelectorError with the position for SQL), not later at the broker."""

    expression_type: str
    expression: str

    @classmethod
    def by_tag(cls, expression: str | None = SUB_ALL) -> MessageSelector:
        _parse_tags(expression)
        return cls(TAG, (expression or "").strip() or SUB_ALL)

    @classmethod
    def by_sql(cls, sql: str) -> MessageSelector:
        """RocketMQ's SQL92 subset on message properties (and TAGS); docs/filtering.md."""
        compile_selector(sql)
        return cls(SQL92, sql)


def _parse_tags(expression: str | None) -> frozenset[str]:
    expr = (expression or "").strip()
    if not expr or expr == SUB_ALL:
        return frozenset()
    tags = frozenset(t.strip() for t in expr.split("||") if t.strip())
    if not tags:
        raise ValueError(f"subscription expression {expression!r} names no tag")
    if any(_NOT_IN_TAGS.search(t) for t in tags):
        # 'amount > 5' would otherwise be taken as one tag and match nothing, silently.
        raise ValueError(f"subscription expression {expression!r} is not a tag expression ('*' or "
                         "'TagA || TagB'); for an SQL92 selector use MessageSelector.by_sql")
    return tags


@dataclass(frozen=True, slots=True)
class Subscription:
    topic: str
    expression: str
    tags: frozenset[str]
    sub_version: int
    expression_type: str = TAG

    @classmethod
    def parse(cls, topic: str, expression: str | MessageSelector | None = SUB_ALL) -> Subscription:
        version = int(time.time() * 1000)
        if isinstance(expression, MessageSelector):
            if expression.expression_type == SQL92:
                return cls(topic, expression.expression, frozenset(), version, SQL92)
            expression = expression.expression
        tags = _parse_tags(expression)
        return cls(topic, (expression or "").strip() if tags else SUB_ALL, tags, version)

    @property
    def matches_all(self) -> bool:
        """No tag check here: every tag, or an SQL92 selector (the broker applies it exactly)."""
        return not self.tags

    def accepts(self, msg: MessageExt) -> bool:
        """The broker filters by tag hash; hashes collide, so the tag itself is checked here."""
        return not self.tags or (msg.tags or "") in self.tags

    def to_json(self) -> dict[str, Any]:
        return {
            "classFilterMode": False,
            "codeSet": sorted(java_string_hash(t) for t in self.tags),
            "expressionType": self.expression_type,
            "subString": self.expression,
            "subVersion": self.sub_version,
            "tagsSet": sorted(self.tags),
            "topic": self.topic,
        }
