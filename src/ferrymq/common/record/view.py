"""A decoded stored message whose properties, hosts and ids stay encoded until asked for.

A consumer that reads the body and the queue offset of most messages never pays for parsing
their properties or formatting two host addresses and an offset id. The view keeps a
reference to the buffer the record was decoded from (a pull body is shared by its records)."""

from __future__ import annotations

import mmap
from collections.abc import Callable
from typing import Any

from ..message import MessageExt
from ..props import PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX
from .layout import (
    POS_BORNHOST,
    born_host_size,
    offset_msg_id,
    store_host_size,
    store_timestamp_position,
    unpack_host,
)

Buffer = bytes | bytearray | memoryview | mmap.mmap


class StoredMessage(MessageExt):
    """MessageExt decoded lazily from a record at `_at` in `_buf`. The lazy fields live in
    slots of their own, None until first asked for (the base class's slots stay unused)."""

    __slots__ = ("_at", "_born_host", "_buf", "_msg_id", "_offset_msg_id", "_props",
                 "_props_at", "_store_host")
    _at: int
    _buf: Buffer
    _props_at: int
    _props: dict[str, str] | None
    _born_host: str | None
    _store_host: str | None
    _msg_id: str | None
    _offset_msg_id: str | None

    # The codec in use decodes the property bytes (set when ferrymq.common.record loads).
    decode_properties: Callable[[Buffer], dict[str, str]]

    @property  # type: ignore[override]
    def properties(self) -> dict[str, str]:
        value = self._props
        if value is None:
            end = self._at + self.store_size
            value = self._props = type(self).decode_properties(
                memoryview(self._buf)[self._props_at : end])
        return value

    @properties.setter
    def properties(self, value: dict[str, str]) -> None:
        self._props = value

    @property  # type: ignore[override]
    def born_host(self) -> str:
        value = self._born_host
        if value is None:
            at = self._at + POS_BORNHOST
            value = self._born_host = unpack_host(
                memoryview(self._buf)[at : at + born_host_size(self.sys_flag)])
        return value

    @born_host.setter
    def born_host(self, value: str) -> None:
        self._born_host = value

    def _store_host_raw(self) -> bytes:
        at = self._at + store_timestamp_position(self.sys_flag) + 8
        return bytes(memoryview(self._buf)[at : at + store_host_size(self.sys_flag)])

    @property  # type: ignore[override]
    def store_host(self) -> str:
        value = self._store_host
        if value is None:
            value = self._store_host = unpack_host(self._store_host_raw())
        return value

    @store_host.setter
    def store_host(self, value: str) -> None:
        self._store_host = value

    @property  # type: ignore[override]
    def offset_msg_id(self) -> str:
        value = self._offset_msg_id
        if value is None:
            value = self._offset_msg_id = offset_msg_id(self._store_host_raw(),
                                                        self.commit_log_offset)
        return value

    @offset_msg_id.setter
    def offset_msg_id(self, value: str) -> None:
        self._offset_msg_id = value

    @property  # type: ignore[override]
    def msg_id(self) -> str:
        value = self._msg_id
        if value is None:
            value = self._msg_id = (self.properties.get(PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX)
                                    or self.offset_msg_id)
        return value

    @msg_id.setter
    def msg_id(self, value: str) -> None:
        self._msg_id = value

    def materialize(self) -> MessageExt:
        """A plain MessageExt with every field decoded (no reference to the buffer)."""
        return _plain(*self._fields())

    def _fields(self) -> tuple[Any, ...]:
        return (self.topic, self.body, self.properties, self.flag, self.queue_id,
                self.queue_offset, self.commit_log_offset, self.sys_flag, self.born_timestamp,
                self.born_host, self.store_timestamp, self.store_host, self.reconsume_times,
                self.prepared_transaction_offset, self.body_crc, self.store_size, self.msg_id,
                self.offset_msg_id, self.broker)

    def __reduce__(self) -> tuple[Any, ...]:
        # A memoryview cannot be pickled: ship a plain MessageExt instead.
        return _plain, self._fields()


def _plain(topic: str, body: bytes, properties: dict[str, str], flag: int, queue_id: int,
           queue_offset: int, commit_log_offset: int, sys_flag: int, born_timestamp: int,
           born_host: str, store_timestamp: int, store_host: str, reconsume_times: int,
           prepared_transaction_offset: int, body_crc: int, store_size: int, msg_id: str,
           offset_msg_id: str, broker: str) -> MessageExt:
    return MessageExt(
        topic, body, properties=properties, flag=flag, queue_id=queue_id,
        queue_offset=queue_offset, commit_log_offset=commit_log_offset, sys_flag=sys_flag,
        born_timestamp=born_timestamp, born_host=born_host, store_timestamp=store_timestamp,
        store_host=store_host, reconsume_times=reconsume_times,
        prepared_transaction_offset=prepared_transaction_offset, body_crc=body_crc,
        store_size=store_size, msg_id=msg_id, offset_msg_id=offset_msg_id, broker=broker)
