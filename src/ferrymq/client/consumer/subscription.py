"""A consumer's subscription to one topic: a tag expression ('*' or 'TagA || TagB')."""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from typing import Any

from ...common.message import MessageExt
from ...common.names import java_string_hash

SUB_ALL = "*"
# Whitespace, comparison operators, parentheses and quotes: what a SQL92 filter has, never a tag.
_NOT_IN_TAGS = re.compile(r"[\s<>=!()'\"]")


@dataclass(frozen=True, slots=True)
class Subscription:
    topic: str
    expression: str
    tags: frozenset[str]
    sub_version: int

    @classmethod
    def parse(cls, topic: str, expression: str | None = SUB_ALL) -> Subscription:
        expr = (expression or "").strip()
        version = int(time.time() * 1000)
        if not expr or expr == SUB_ALL:
            return cls(topic, SUB_ALL, frozenset(), version)
        tags = frozenset(t.strip() for t in expr.split("||") if t.strip())
        if not tags:
            raise ValueError(f"subscription expression {expression!r} names no tag")
        if any(_NOT_IN_TAGS.search(t) for t in tags):
            # 'amount > 5' would otherwise be taken as one tag and match nothing, silently.
            raise ValueError(f"subscription expression {expression!r} is not a tag expression ('*' or "
                             "'TagA || TagB'): SQL92 filtering is not supported")
        return cls(topic, expr, tags, version)

    @property
    def matches_all(self) -> bool:
        return not self.tags

    def accepts(self, msg: MessageExt) -> bool:
        """The broker filters by tag hash; hashes collide, so the tag itself is checked here."""
        return not self.tags or (msg.tags or "") in self.tags

    def to_json(self) -> dict[str, Any]:
        return {
            "classFilterMode": False,
            "codeSet": sorted(java_string_hash(t) for t in self.tags),
            "expressionType": "TAG",
            "subString": self.expression,
            "subVersion": self.sub_version,
            "tagsSet": sorted(self.tags),
            "topic": self.topic,
        }
