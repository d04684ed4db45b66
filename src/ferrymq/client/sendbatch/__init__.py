"""The send-batch core: what one SEND_BATCH_MESSAGE carries, encoded as its messages join it
(`EntryBatch`), and the lane through which a blocking producer's callers hand messages to the
I/O loop (`Lane`). Two implementations of the same classes, as the codecs have: `_cbatch`
(compiled with Cython when the package is installed) and `_py` (pure Python), chosen as
ferrymq.common.speedups says."""

from __future__ import annotations

from types import ModuleType
from typing import TYPE_CHECKING

from ...common.speedups import choose
from . import _py

impl: ModuleType = choose("ferrymq.client.sendbatch._cbatch", _py)
IMPLEMENTATION: str = impl.IMPLEMENTATION

if TYPE_CHECKING:
    from ._py import EntryBatch, Lane
else:
    EntryBatch = impl.EntryBatch
    Lane = impl.Lane

__all__ = ["IMPLEMENTATION", "EntryBatch", "Lane", "impl"]
