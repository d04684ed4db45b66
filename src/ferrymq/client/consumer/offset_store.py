"""Where a consumer's progress lives: on the broker for clustering consumers
(RemoteBrokerOffsetStore), in a local file for broadcasting ones (LocalFileOffsetStore).

Offsets are updated in memory after every consumed batch and written out soon after (the
consumer's commit loop, coalesced), periodically, on pulls (the broker takes the
piggy-backed offset) and at shutdown. With a ferrymq broker the ranges already consumed above
the committed offset go along, and come back when a queue is taken over or a consumer
restarts, so those messages are not consumed again."""

from __future__ import annotations

import asyncio
import logging
import os
import threading
from collections import defaultdict
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Protocol

from ...common import jsonx
from ...common.codes import RequestCode, ResponseCode
from ...common.errors import FerryMQError
from ...common.headers import fields
from ...common.jsonx import FrozenKey
from ...common.message import MessageQueue
from ...common.names import MASTER_ID
from ...common.progress import (
    HANDOVER_WAIT_MS,
    RELEASED,
    WITH_ACK_RANGES,
    ProgressDecodeError,
    QueueProgressUpdate,
    decode_ranges,
    encode_progress,
)
from ..api import mq_from_key
from ..errors import ClientError, broker_error
from ..instance import ClientInstance

log = logging.getLogger("ferrymq.client.offsets")

Ranges = list[tuple[int, int]]
RangesOf = Callable[[], Ranges]


# How long a member taking a queue over lets the broker wait for the previous owner's release.
HANDOVER_WAIT_BUDGET_MS = 2000


class OffsetStore(Protocol):
    async def load(self) -> None: ...

    def update(self, mq: MessageQueue, offset: int, *, increase_only: bool) -> None: ...

    def track(self, mq: MessageQueue, ranges: RangesOf | None) -> None: ...

    def read_memory(self, mq: MessageQueue) -> int: ...

    async def read_store(self, mq: MessageQueue, *, taking: bool = False) -> int:
        """`taking`: this member takes the queue over (rebalance); only then may the broker
        hold the answer for the previous owner's release."""

    async def query_store(self, mq: MessageQueue) -> int:
        """The offset stored for the group (-1: none), read only: the local table is left as
        it is (a look, such as LitePullConsumer.committed, must not move the consumer)."""

    def loaded_ranges(self, mq: MessageQueue) -> Ranges: ...

    def take_dirty(self) -> set[MessageQueue]: ...

    async def persist(self, mqs: set[MessageQueue], *, release: bool = False) -> None:
        """`release`: this member gives these queues up; the broker may hand them over now."""

    async def commit(self, mqs: set[MessageQueue]) -> None:
        """What finished since the last round of the consumer's commit loop, sent without
        waiting for an answer where the broker allows it."""

    def remove(self, mq: MessageQueue) -> None: ...


class _MemoryTable:
    def __init__(self) -> None:
        self.offsets: dict[MessageQueue, int] = {}
        # Where each queue's acknowledged ranges above its offset come from (its process
        # queue); asked only when the offset goes out, so acknowledging stays O(1).
        self.ranges_of: dict[MessageQueue, RangesOf] = {}
        self._loaded: dict[MessageQueue, Ranges] = {}
        self.dirty: set[MessageQueue] = set()
        self.on_dirty: Callable[[], None] = lambda: None

    def update(self, mq: MessageQueue, offset: int, *, increase_only: bool) -> None:
        current = self.offsets.get(mq)
        if increase_only and current is not None and offset < current:
            return
        self.offsets[mq] = offset
        if not self.dirty:
            self.on_dirty()
        self.dirty.add(mq)

    def track(self, mq: MessageQueue, ranges: RangesOf | None) -> None:
        if ranges is None:
            self.ranges_of.pop(mq, None)
        else:
            self.ranges_of[mq] = ranges
            if not self.dirty:
                self.on_dirty()
            self.dirty.add(mq)

    def acked(self, mq: MessageQueue, offset: int) -> Ranges:
        source = self.ranges_of.get(mq)
        return [] if source is None else [(a, b) for a, b in source() if a > offset]

    def read_memory(self, mq: MessageQueue) -> int:
        return self.offsets.get(mq, -1)

    def loaded_ranges(self, mq: MessageQueue) -> Ranges:
        """The acknowledged ranges read from the store with the queue's offset."""
        return self._loaded.pop(mq, [])

    def take_dirty(self) -> set[MessageQueue]:
        dirty, self.dirty = self.dirty, set()
        return dirty

    def remove(self, mq: MessageQueue) -> None:
        self.offsets.pop(mq, None)
        self.ranges_of.pop(mq, None)
        self._loaded.pop(mq, None)
        self.dirty.discard(mq)


class RemoteOffsetStore(_MemoryTable):
    """With a ferrymq broker all queues of one broker go in one UPDATE_CONSUMER_PROGRESS
    (offsets and ranges, answered once durable); an Apache RocketMQ broker gets
    UPDATE_CONSUMER_OFFSET per queue."""

    def __init__(
        self,
        inst: ClientInstance,
        group: str,
        *,
        precise_ack: bool = True,
        read_from: Mapping[MessageQueue, int] | None = None,
    ) -> None:
        super().__init__()
        self.inst = inst
        self.group = group
        self.precise_ack = precise_ack
        # Offsets go where the queue is pulled from: the suggested broker, else the master,
        # else (the master is away) a slave, which hands them to the master once it is back.
        self.read_from: Mapping[MessageQueue, int] = read_from if read_from is not None else {}
        self._extension: dict[str, bool] = {}  # broker address -> knows the extension

    async def load(self) -> None:
        return None

    async def _addr(self, mq: MessageQueue, *, handover: bool = False) -> str:
        # A hand-over (the new owner's question, the old owner's release) meets on the master
        # (a slave while it is away), whichever broker either side last read the queue from.
        suggested = MASTER_ID if handover else self.read_from.get(mq, MASTER_ID)
        addr = await self.inst.find_read_addr(mq.broker_name, mq.topic, suggested)
        if addr is None:
            raise ClientError(f"broker {mq.broker_name} of {mq} has no known address")
        return addr

    async def read_store(self, mq: MessageQueue, *, taking: bool = False) -> int:
        """The broker's committed offset (-1: none); remembered locally when found, with the
        ranges above it already acknowledged (see loaded_ranges). `taking`: see OffsetStore."""
        ext = fields(consumerGroup=self.group, topic=mq.topic, queueId=mq.queue_id)
        if self.precise_ack:
            ext[WITH_ACK_RANGES] = "true"
        api = self.inst.api
        timeout = api.timeout
        if taking:
            # A ferrymq broker may hold the answer until the queue's previous owner released
            # it (its last progress committed): the request's timeout covers that wait.
            ext[HANDOVER_WAIT_MS] = str(HANDOVER_WAIT_BUDGET_MS)
            timeout += HANDOVER_WAIT_BUDGET_MS / 1000
        resp = await api.invoke_ok(
            await self._addr(mq, handover=taking),
            RequestCode.QUERY_CONSUMER_OFFSET,
            ext,
            timeout=timeout,
            ok=(ResponseCode.SUCCESS, ResponseCode.QUERY_NOT_FOUND),
        )
        if resp.code == ResponseCode.QUERY_NOT_FOUND:
            return -1
        offset = int(resp.ext_fields.get("offset", "-1"))
        if offset >= 0:
            self.update(mq, offset, increase_only=False)
            self.dirty.discard(mq)
            if self.precise_ack and resp.body:
                try:
                    self._loaded[mq] = decode_ranges(resp.body, offset)
                except ProgressDecodeError as exc:
                    log.warning("%s: ack ranges of %s ignored: %s", self.group, mq, exc)
        return offset

    async def query_store(self, mq: MessageQueue) -> int:
        api = self.inst.api
        return await api.query_consumer_offset(await self._addr(mq), self.group, mq.topic, mq.queue_id)

    async def persist(self, mqs: set[MessageQueue], *, release: bool = False) -> None:
        failed = await self._persist_once(mqs, release)
        # A broker that is gone makes its queues' route be fetched again; where that names
        # another broker (a slave while the master is away), the offsets go there now.
        retry: set[MessageQueue] = set()
        for addr, qs, exc in failed:
            topics = {mq.topic for mq in qs}
            refreshed = [await self.inst.after_failure(t, exc) for t in sorted(topics)]
            if any(refreshed):
                for mq in qs:
                    try:
                        if await self._addr(mq, handover=release) != addr:
                            retry.add(mq)
                    except FerryMQError:
                        pass
            else:
                log.warning("%s: persisting offsets on %s failed: %s", self.group, addr, exc)
        for addr, _, exc in await self._persist_once(retry, release) if retry else []:
            log.warning("%s: persisting offsets on %s failed: %s", self.group, addr, exc)

    async def _persist_once(
        self, mqs: set[MessageQueue], release: bool
    ) -> list[tuple[str, list[MessageQueue], FerryMQError]]:
        by_addr: dict[str, list[MessageQueue]] = defaultdict(list)
        for mq in mqs:
            if self.offsets.get(mq, -1) < 0:
                continue
            try:
                by_addr[await self._addr(mq, handover=release)].append(mq)
            except FerryMQError as exc:
                log.warning("%s: persisting offset of %s failed: %s", self.group, mq, exc)
        results = await asyncio.gather(
            *(self._persist_broker(addr, qs, release) for addr, qs in by_addr.items()),
            return_exceptions=True,
        )
        failed: list[tuple[str, list[MessageQueue], FerryMQError]] = []
        for (addr, qs), result in zip(by_addr.items(), results, strict=True):
            if isinstance(result, FerryMQError):
                failed.append((addr, qs, result))
            elif isinstance(result, BaseException):
                raise result
        return failed

    async def commit(self, mqs: set[MessageQueue]) -> None:
        """A round of the commit loop: one oneway UPDATE_CONSUMER_PROGRESS per broker, which
        the broker applies on arrival and journals with its next write, nobody waiting. So a
        round does not wait for the previous one's answer, a round trip and the broker's
        fsync (what finished meanwhile was consumed again after a kill -9 of the consumer).
        Rounds are ordered with the pulls and the awaited persists on the broker's one
        connection. A broker not answered yet is taken for a ferrymq one, as persist does: an
        Apache RocketMQ broker ignores the request and is known as such after the first
        awaited persist; from then on, and after a failed send, a round there is the awaited
        persist."""
        oneway: dict[str, list[MessageQueue]] = defaultdict(list)
        awaited: set[MessageQueue] = set()
        for mq in mqs:
            if self.offsets.get(mq, -1) < 0:
                continue
            try:
                addr = await self._addr(mq)
            except FerryMQError:
                awaited.add(mq)  # persist logs it
                continue
            if self._extension.get(addr, True):
                oneway[addr].append(mq)
            else:
                awaited.add(mq)
        api = self.inst.api
        for addr, qs in oneway.items():
            try:
                await api.invoke_oneway(
                    addr, RequestCode.UPDATE_CONSUMER_PROGRESS, None, self._progress_body(qs)
                )
            except FerryMQError:
                awaited.update(qs)  # persist refreshes the route of a broker that is gone
        if awaited:
            await self.persist(awaited)

    def _progress_body(self, mqs: list[MessageQueue]) -> bytes:
        updates = []
        for mq in sorted(mqs):
            offset = self.offsets[mq]
            # Sent even with no ranges, so the broker never keeps ranges we no longer hold.
            acked = tuple(self.acked(mq, offset)) if self.precise_ack else ()
            updates.append(QueueProgressUpdate(mq.topic, mq.queue_id, offset, acked))
        return encode_progress(self.group, updates)

    async def _persist_broker(self, addr: str, mqs: list[MessageQueue], release: bool) -> None:
        api = self.inst.api
        if self._extension.get(addr, True):
            resp = await api.invoke(
                addr, RequestCode.UPDATE_CONSUMER_PROGRESS, {RELEASED: "true"} if release else None,
                self._progress_body(mqs),
            )
            if resp.code == ResponseCode.SUCCESS:
                self._extension[addr] = True
                return
            if resp.code != ResponseCode.REQUEST_CODE_NOT_SUPPORTED:
                raise broker_error(addr, RequestCode.UPDATE_CONSUMER_PROGRESS, resp.code, resp.remark)
            self._extension[addr] = False
        await asyncio.gather(
            *(
                api.update_consumer_offset(addr, self.group, mq.topic, mq.queue_id, self.offsets[mq])
                for mq in mqs
            )
        )


class LocalOffsetStore(_MemoryTable):
    """RocketMQ's offsets.json shape: {"offsetTable": {<MessageQueue>: offset}}."""

    def __init__(self, path: Path) -> None:
        super().__init__()
        self.path = path
        self._stored: dict[MessageQueue, int] = {}
        # Writes share one temporary file: a persist cancelled at shutdown leaves its write
        # running in its thread while the final persist starts another.
        self._write_lock = threading.Lock()

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

    async def read_store(self, mq: MessageQueue, *, taking: bool = False) -> int:
        offset = self._stored.get(mq, -1)
        if offset >= 0:
            self.update(mq, offset, increase_only=False)
            self.dirty.discard(mq)
        return offset

    async def query_store(self, mq: MessageQueue) -> int:
        return self._stored.get(mq, -1)

    async def commit(self, mqs: set[MessageQueue]) -> None:
        await self.persist(mqs)

    async def persist(self, mqs: set[MessageQueue], *, release: bool = False) -> None:
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
        with self._write_lock:
            with open(tmp, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, self.path)
