"""The record codec's implementations under test: the pure-Python one and the compiled one,
each checked against the other. The compiled one is built by the package's install step
(`make venv`; an install that cannot build it fails), so it is only missing from a source tree
that was never installed: there its tests are reported as skipped, not silently dropped."""

from __future__ import annotations

from types import ModuleType

import pytest

from ferrymq.common.record import _py as PY

try:
    from ferrymq.common.record import _crecord as C  # type: ignore[attr-defined]
except ImportError:
    C = None

IMPLS: list[ModuleType] = [PY] + ([C] if C is not None else [])
OTHERS: dict[ModuleType, list[ModuleType]] = {m: [o for o in IMPLS if o is not m] for m in IMPLS}
PARAMS = [pytest.param(PY, id="python"),
          pytest.param(C, id="cython") if C is not None else
          pytest.param(None, id="cython", marks=pytest.mark.skip(
              reason="the compiled codec is not built in this tree (make venv builds it)"))]
