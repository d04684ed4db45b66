"""RocketMQ's permission bits and their text in plain_acl.yml."""

from __future__ import annotations

from enum import IntFlag


class Perm(IntFlag):
    DENY = 1
    ANY = 2
    PUB = 4
    SUB = 8


_TEXT = {
    "PUB": Perm.PUB,
    "SUB": Perm.SUB,
    "PUB|SUB": Perm.PUB | Perm.SUB,
    "SUB|PUB": Perm.PUB | Perm.SUB,
    "DENY": Perm.DENY,
}


def parse_perm(text: str | None) -> Perm | None:
    """The permission a text names; None for a text that names none (a missing one is DENY,
    as RocketMQ reads it)."""
    if text is None:
        return Perm.DENY
    return _TEXT.get(text.strip())


def perm_text(perm: int) -> str:
    if perm & Perm.DENY:
        return "DENY"
    names = [n for n, p in (("PUB", Perm.PUB), ("SUB", Perm.SUB)) if perm & p]
    return "|".join(names) or "ANY"


def check_permission(needed: int, owned: int) -> bool:
    if owned & Perm.DENY:
        return False
    if needed & Perm.ANY:
        return bool(owned & (Perm.PUB | Perm.SUB))
    return bool(needed & owned)
