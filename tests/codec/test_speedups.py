"""Selection of compiled modules: a stale build (one that lacks part of its pure twin's
interface) must not be loaded half-way; the pure twin is used instead."""

from __future__ import annotations

import sys
import types

import pytest

from ferrymq.common import speedups


def _module(name: str, **attrs: object) -> types.ModuleType:
    mod = types.ModuleType(name)
    for key, value in attrs.items():
        setattr(mod, key, value)
    return mod


def test_a_compiled_module_missing_a_function_is_passed_over(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(speedups.ENV, raising=False)
    pure = _module("pure_twin", INTERFACE=("encode", "decode"), encode=len, decode=len)
    monkeypatch.setitem(sys.modules, "stale_build", _module("stale_build", encode=len))
    assert speedups.choose("stale_build", pure) is pure
    complete = _module("fresh_build", encode=len, decode=len)
    monkeypatch.setitem(sys.modules, "fresh_build", complete)
    assert speedups.choose("fresh_build", pure) is complete
    monkeypatch.setenv(speedups.ENV, "1")
    assert speedups.choose("fresh_build", pure) is pure
