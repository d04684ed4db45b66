"""Where a consumer's progress lives: on the broker for clustering consumers
(RemoteBrokerOffsetStore), in a local file for broadcasting ones (LocalFileOffsetStore).

Offsets are updated in memory after every consumed batch and written out periodically, on
pulls (the broker takes the piggy-backed offset) and at shutdown. With a ferrymq broker the
ranges already consumed above the committed offset go along (UPDATE_CONSUMER_ACK_RANGES)."""

from __future__ import annotations

import asyncio
import logging
import os
from pathlib import Path
from typing import Protocol

from ...common import jsonx
from ...common.errors import FerryMQError
from ...common.jsonx import FrozenKey
from ...common.message import MessageQueue
from ..api import mq_from_key
from ..errors import ClientError
from ..instance import ClientInstance

log = logging.getLogger("ferrymq.client.offsets")

Ranges = list[tuple[int, int]]


class OffsetStore(Protocol):
    async def load(self) -> None: ...

    def update(
        self, mq: MessageQueue, offset: int, *, increase_only: bool, acked: Ranges | None = None
    ) -> None: ...

    def read_memory(self, mq: MessageQueue) -> int: ...

    async def read_store(self, mq: MessageQueue) -> int: ...

    async def persist(self, mqs: set[MessageQueue]) -> None: ...

    def remove(self, mq: MessageQueue) -> None: ...


class _MemoryTable:
    def __init__(self) -> None:
        self.offsets: dict[MessageQueue, int] = {}
        self.acked: dict[MessageQueue, Ranges] = {}

    def update(
        self, mq: MessageQueue, offset: int, *, increase_only: bool, acked: Ranges | None = None
    ) -> None:
        current = self.offsets.get(mq)
        if increase_only and current is not None and offset < current:
            return
        self.offsets[mq] = offset
        if acked is not None:
            self.acked[mq] = [(a, b) for a, b in acked if a > offset]
        elif current is None or offset != current:
            self.acked[mq] = [(a, b) for a, b in self.acked.get(mq, []) if a > offset]

    def read_memory(self, mq: MessageQueue) -> int:
        return self.offsets.get(mq, -1)

    def remove(self, mq: MessageQueue) -> None:
        self.offsets.pop(mq, None)
        self.acked.pop(mq, None)


class RemoteOffsetStore(_MemoryTable):
    def __init__(self, inst: ClientInstance, group: str, *, precise_ack: bool = True) -> None:
        super().__init__()
        self.inst = inst
        self.group = group
        self.precise_ack = precise_ack
        self._ack_supported: dict[str, bool] = {}  # broker address -> knows the extension

    async def load(self) -> None:
        return None

    async def _addr(self, mq: MessageQueue) -> str:
        addr = await self.inst.find_broker_addr(mq.broker_name, mq.topic)
        if addr is None:
            raise ClientError(f"broker {mq.broker_name} of {mq} has no known address")
        return addr

    async def read_store(self, mq: MessageQueue) -> int:
        """The broker's committed offset (-1: none); remembered locally when found."""
        offset = await self.inst.api.query_consumer_offset(
            await self._addr(mq), self.group, mq.topic, mq.queue_id
        )
        if offset >= 0:
            self.update(mq, offset, increase_only=False, acked=[])
        return offset

    async def persist_one(self, mq: MessageQueue) -> None:
        offset = self.offsets.get(mq)
        if offset is None or offset < 0:
            return
        addr = await self._addr(mq)
        api = self.inst.api
        if self.precise_ack and self._ack_supported.get(addr, True):
            # Sent even with no ranges, so the broker never keeps ranges we no longer hold.
            ok = await api.update_ack_ranges(
                addr, self.group, mq.topic, mq.queue_id, offset, self.acked.get(mq, [])
            )
            self._ack_supported[addr] = ok
            if ok:
                return
        await api.update_consumer_offset(addr, self.group, mq.topic, mq.queue_id, offset)

    async def persist(self, mqs: set[MessageQueue]) -> None:
        targets = [mq for mq in list(self.offsets) if mq in mqs]
        results = await asyncio.gather(
            *(self.persist_one(mq) for mq in targets), return_exceptions=True
        )
        for mq, result in zip(targets, results, strict=True):
            if isinstance(result, FerryMQError):
                log.warning("%s: persisting offset of %s failed: %s", self.group, mq, result)
            elif isinstance(result, BaseException):
                raise result


class LocalOffsetStore(_MemoryTable):
    """RocketMQ's offsets.json shape: {"offsetTable": {<MessageQueue>: offset}}."""

    def __init__(self, path: Path) -> None:
        super().__init__()
        self.path = path
        self._stored: dict[MessageQueue, int] = {}

    async def load(self) -> None:
        self._stored = await asyncio.to_thread(self._read)
        self.offsets.update(self._stored)

    def _read(self) -> dict[MessageQueue, int]:
        try:
            data = jsonx.loads(self.path.read_bytes())
        except FileNotFoundError:
            return {}
        except ValueError as exc:
            log.warning("offset file %s is unreadable (%s); starting without it", self.path, exc)
            return {}
        return {mq_from_key(k): int(v) for k, v in (data.get("offsetTable") or {}).items()}

    async def read_store(self, mq: MessageQueue) -> int:
        offset = self._stored.get(mq, -1)
        if offset >= 0:
            self.update(mq, offset, increase_only=False)
        return offset

    async def persist(self, mqs: set[MessageQueue]) -> None:
        for mq in mqs:
            if mq in self.offsets:
                self._stored[mq] = self.offsets[mq]
        table = {
            FrozenKey(
                (("brokerName", mq.broker_name), ("queueId", mq.queue_id), ("topic", mq.topic))
            ): off
            for mq, off in sorted(self._stored.items())
        }
        await asyncio.to_thread(self._write, jsonx.dumps_bytes({"offsetTable": table}))

    def _write(self, data: bytes) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        with open(tmp, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, self.path)
