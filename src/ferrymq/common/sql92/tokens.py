"""The tokens of RocketMQ's selector grammar (SelectorParser.jj): JavaCC's rules, so the
longest match wins and, at equal length, a keyword beats a name ('and' is AND, 'android'
is a name). Keywords and names are case-insensitive; only ASCII letters make names."""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass

from .errors import SelectorError


class Kind(enum.Enum):
    KEYWORD = "keyword"
    DECIMAL = "decimal"
    FLOAT = "float"
    STRING = "string"
    ID = "name"
    OP = "operator"
    EOF = "end of expression"


KEYWORDS = frozenset({"NOT", "AND", "OR", "BETWEEN", "IN", "TRUE", "FALSE", "NULL", "IS",
                      "CONTAINS", "STARTSWITH", "ENDSWITH"})


@dataclass(frozen=True, slots=True)
class Token:
    kind: Kind
    text: str  # keywords upper-cased; everything else as written
    pos: int

    def describe(self) -> str:
        if self.kind is Kind.EOF:
            return "the end of the expression"
        return f"{self.kind.value} {self.text!r}"


_SPACE = " \t\n\r\f"
# Alternatives in JavaCC's order; each is tried at a position and the longest wins.
_DECIMAL = re.compile(r"0|[1-9][0-9]*[lL]?")
_FLOAT = re.compile(r"[0-9]+\.[0-9]*(?:[eE][+-]?[0-9]+)?|\.[0-9]+(?:[eE][+-]?[0-9]+)?"
                    r"|[0-9]+[eE][+-]?[0-9]+")
_WORD = re.compile(r"[A-Za-z_$][A-Za-z0-9_$]*")
_STRING = re.compile(r"'(?:''|[^'])*'")
_LINE_COMMENT = re.compile(r"--[^\n\r]*(?:\r\n|\n|\r)")
_BLOCK_COMMENT = re.compile(r"/\*.*?\*/", re.S)
_OPS = ("<>", ">=", "<=", "=", ">", "<", "(", ")", ",", "+", "-")


def tokenize(text: str) -> list[Token]:
    """All tokens of `text`, ending with an EOF token. Raises SelectorError on a character
    no token starts with, an unterminated string or an unterminated block comment."""
    out: list[Token] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c in _SPACE:
            i += 1
            continue
        if text.startswith("--", i):
            m = _LINE_COMMENT.match(text, i)
            if m is not None:
                i = m.end()
                continue
            # JavaCC's rule: a comment ends with a line break; without one, '--' is two minus
            # signs (the parser explains this when they are left over).
        if text.startswith("/*", i):
            m = _BLOCK_COMMENT.match(text, i)
            if m is None:
                raise SelectorError(text, i, "unterminated comment")
            i = m.end()
            continue
        if c == "'":
            m = _STRING.match(text, i)
            if m is None:
                raise SelectorError(text, i, "unterminated string literal")
            out.append(Token(Kind.STRING, m.group(), i))
            i = m.end()
            continue
        number = _number(text, i)
        if number is not None:
            out.append(number)
            i += len(number.text)
            continue
        m = _WORD.match(text, i)
        if m is not None:
            word = m.group()
            upper = word.upper()
            if upper in KEYWORDS:
                out.append(Token(Kind.KEYWORD, upper, i))
            else:
                out.append(Token(Kind.ID, word, i))
            i = m.end()
            continue
        for op in _OPS:
            if text.startswith(op, i):
                out.append(Token(Kind.OP, op, i))
                i += len(op)
                break
        else:
            raise SelectorError(text, i, f"unexpected character {c!r}")
    out.append(Token(Kind.EOF, "", n))
    return out


def _number(text: str, i: int) -> Token | None:
    d = _DECIMAL.match(text, i)
    f = _FLOAT.match(text, i)
    if f is not None and (d is None or f.end() > d.end()):
        return Token(Kind.FLOAT, f.group(), i)
    if d is not None:
        return Token(Kind.DECIMAL, d.group(), i)
    return None


def string_value(token: Token) -> str:
    """The text of a string literal: quotes removed, '' read as one quote."""
    return token.text[1:-1].replace("''", "'")
