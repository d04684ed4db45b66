"""The record codec's implementations under test: every one that this install provides.
The compiled one is built by the package's install step (`make venv`), so it is expected
here even when FERRYMQ_NO_EXTENSIONS=1 selects Python for everything else."""

from __future__ import annotations

from types import ModuleType

from ferrymq.common.record import _py as PY

IMPLS: list[ModuleType] = [PY]
OTHERS: dict[ModuleType, list[ModuleType]] = {m: [o for o in IMPLS if o is not m] for m in IMPLS}
