"""Paths in the public API: taken as text or any path-like object (StrPath), held as Path.

as_path is the one conversion. PathField and OptionalPathField are dataclass fields that do
it on construction, so a config's constructor takes StrPath while its attribute is typed (and
is) a Path: a descriptor's __set__ types the constructor's argument, its __get__ the
attribute. A frozen dataclass's __init__ goes through __set__ too (object.__setattr__). The
dataclass must not use slots=True: slots would replace the descriptor."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, TypeAlias

StrPath: TypeAlias = str | os.PathLike[str]


def as_path(value: StrPath) -> Path:
    return value if isinstance(value, Path) else Path(value)


class PathField:
    """A field holding a Path, given as StrPath, with a default."""

    def __init__(self, default: StrPath) -> None:
        self._default = as_path(default)
        self._attr = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self._attr = f"_path_{name}"

    def __get__(self, obj: object | None, owner: Any) -> Path:
        if obj is None:  # the class's own look-up: dataclasses take this as the default
            return self._default
        value: Path = obj.__dict__[self._attr]
        return value

    def __set__(self, obj: object, value: StrPath) -> None:
        obj.__dict__[self._attr] = as_path(value)


class OptionalPathField:
    """A field holding a Path or None, given as StrPath or None; None by default."""

    def __init__(self) -> None:
        self._attr = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self._attr = f"_path_{name}"

    def __get__(self, obj: object | None, owner: Any) -> Path | None:
        if obj is None:
            return None
        value: Path | None = obj.__dict__[self._attr]
        return value

    def __set__(self, obj: object, value: StrPath | None) -> None:
        obj.__dict__[self._attr] = None if value is None else as_path(value)
