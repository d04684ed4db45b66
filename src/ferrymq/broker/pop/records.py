"""The one field of a stored record a pop delivery changes: RECONSUMETIMES, which tells the
consumer how many times the message was delivered before (a record is otherwise sent as
stored, as PULL_MESSAGE sends it)."""

from __future__ import annotations

from ...common.record.layout import (
    I32,
    IPV6_EXTRA,
    POS_RECONSUMETIMES_V4,
    POS_SYSFLAG,
    SYSFLAG_BORNHOST_V6,
    SYSFLAG_STOREHOST_V6,
)


def _reconsume_position(raw: bytes | bytearray) -> int:
    sys_flag = I32.unpack_from(raw, POS_SYSFLAG)[0]
    pos = POS_RECONSUMETIMES_V4
    if sys_flag & SYSFLAG_BORNHOST_V6:
        pos += IPV6_EXTRA
    if sys_flag & SYSFLAG_STOREHOST_V6:
        pos += IPV6_EXTRA
    return pos


def reconsume_times(raw: bytes | bytearray) -> int:
    value: int = I32.unpack_from(raw, _reconsume_position(raw))[0]
    return value


def with_reconsume_times(raw: bytes, n: int) -> bytes:
    pos = _reconsume_position(raw)
    if I32.unpack_from(raw, pos)[0] == n:
        return raw
    out = bytearray(raw)
    I32.pack_into(out, pos, n)
    return bytes(out)
