"""The record codec: RocketMQ's stored-message layout (layout.py) and the per-message work on
it, behind one interface with two implementations of the same functions, as aiokafka's
`record` package has: `_crecord` (compiled with Cython when the package is installed) and
`_py` (pure Python). The compiled one is used when it was built, unless the environment sets
FERRYMQ_NO_EXTENSIONS=1; a missing extension silently falls back to Python."""

from __future__ import annotations

from types import ModuleType
from typing import TYPE_CHECKING

from ..message import MessageBatchItem
from ..speedups import choose, interface
from . import _py
from ._py import has_property, with_property
from .layout import (
    BLANK_MAGIC_CODE,
    KEY_ENTRY,
    MARK_TIMER,
    MARK_TRANSACTION,
    MAX_PROPERTIES_BYTES,
    MAX_TOPIC_BYTES,
    MESSAGE_MAGIC_CODE,
    MIN_RECORD_SIZE,
    SYSFLAG_BORNHOST_V6,
    SYSFLAG_COMPRESSED,
    SYSFLAG_MULTI_TAGS,
    SYSFLAG_STOREHOST_V6,
    MessageDecodeError,
    RecordEncodeError,
    body_crc,
    pack_host,
    record_size,
    store_timestamp_position,
    unpack_host,
)
from .view import StoredMessage

impl: ModuleType = choose("ferrymq.common.record._crecord", _py)
IMPLEMENTATION: str = impl.IMPLEMENTATION
StoredMessage.decode_properties = impl.properties_decode
if TYPE_CHECKING:
    from ._py import (
        batch_to_messages,
        check_batch,
        decode_record,
        decode_records,
        encode_batch,
        encode_messages,
        encode_record,
        first_unsound,
        first_unsound_entries,
        key_entries,
        locate,
        place_messages,
        properties_decode,
        properties_encode,
        properties_scan,
        record_info,
        record_starts,
        record_unsound,
        split_batch,
    )
else:
    globals().update(interface(impl, _py))


Properties = dict[str, str] | bytes


def properties_map(props: Properties) -> dict[str, str]:
    """A message's properties as a map, whether it holds a map or the encoded bytes."""
    return props if isinstance(props, dict) else properties_decode(props)


def property_value(props: Properties, name: str) -> str | None:
    if isinstance(props, dict):
        return props.get(name)
    return properties_decode(props).get(name) if has_property(props, name) else None


def decode_batch(buf: bytes | bytearray | memoryview) -> list[MessageBatchItem]:
    """A SEND_BATCH_MESSAGE body with each message's properties as a map."""
    return [MessageBatchItem(flag, body, properties_decode(props))
            for flag, body, props in split_batch(buf)]


__all__ = [
    "BLANK_MAGIC_CODE",
    "IMPLEMENTATION",
    "KEY_ENTRY",
    "MARK_TIMER",
    "MARK_TRANSACTION",
    "MAX_PROPERTIES_BYTES",
    "MAX_TOPIC_BYTES",
    "MESSAGE_MAGIC_CODE",
    "MIN_RECORD_SIZE",
    "SYSFLAG_BORNHOST_V6",
    "SYSFLAG_COMPRESSED",
    "SYSFLAG_MULTI_TAGS",
    "SYSFLAG_STOREHOST_V6",
    "MessageDecodeError",
    "Properties",
    "RecordEncodeError",
    "StoredMessage",
    "batch_to_messages",
    "body_crc",
    "check_batch",
    "decode_batch",
    "decode_record",
    "decode_records",
    "encode_batch",
    "encode_messages",
    "encode_record",
    "first_unsound",
    "first_unsound_entries",
    "has_property",
    "impl",
    "key_entries",
    "locate",
    "pack_host",
    "place_messages",
    "properties_decode",
    "properties_encode",
    "properties_map",
    "properties_scan",
    "property_value",
    "record_info",
    "record_size",
    "record_starts",
    "record_unsound",
    "split_batch",
    "store_timestamp_position",
    "unpack_host",
    "with_property",
]
