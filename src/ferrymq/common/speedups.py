"""Which compiled modules to use. Each compiled module (Cython, built by the package install)
has a pure-Python twin with the same functions; FERRYMQ_NO_EXTENSIONS=1 selects the twins,
and a compiled module that was not built falls back to its twin silently."""

from __future__ import annotations

import importlib
import logging
import os
from types import ModuleType
from typing import Any

log = logging.getLogger("ferrymq.speedups")

ENV = "FERRYMQ_NO_EXTENSIONS"


def disabled() -> bool:
    return os.environ.get(ENV, "").strip() not in ("", "0")


def compiled(name: str) -> ModuleType | None:
    """The compiled module `name`, or None when disabled or not built."""
    if disabled():
        return None
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        log.debug("compiled module %s unavailable (%s); using pure Python", name, exc)
        return None


def choose(name: str, pure: ModuleType) -> ModuleType:
    """The compiled module `name` if it is to be used, else its pure-Python twin. A compiled
    module built from older sources (it lacks part of the twin's INTERFACE) is not used: the
    install that left it behind is stale, and a half-compiled codec must not be loaded."""
    impl = compiled(name)
    if impl is None:
        return pure
    missing = [n for n in pure.INTERFACE if not hasattr(impl, n)]
    if missing:
        log.warning("compiled module %s is stale (lacks %s); using pure Python until the "
                    "package is reinstalled", name, ", ".join(missing))
        return pure
    return impl


def interface(impl: ModuleType, pure: ModuleType) -> dict[str, Any]:
    """The functions named in the pure module's INTERFACE, as `impl` provides them."""
    return {name: getattr(impl, name) for name in pure.INTERFACE}
