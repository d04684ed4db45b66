"""A full disk: writes are refused with DISK_FULL, nothing stored is harmed, partial writes
are rolled back, and writes resume when space returns. Once on a real small tmpfs (when the
machine lets us mount one), once with errors injected through the store's FileIO seam."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest
from store_util import crash_image, msg, open_store

from conftest import small_tmpfs
from ferrymq.common.record import decode_records
from ferrymq.store import FileIO, GetStatus, MessageStore, PutStatus


class FailingIO(FileIO):
    """Fails the n-th pwrite from now with ENOSPC, optionally after writing part of it."""

    def __init__(self) -> None:
        self.countdown = 0
        self.partial = False

    def arm(self, nth: int, partial: bool = False) -> None:
        self.countdown = nth
        self.partial = partial

    def pwrite(self, fd: int, data: bytes | memoryview, pos: int) -> int:
        if self.countdown:
            self.countdown -= 1
            if self.countdown == 0:
                if self.partial and len(data) > 1:
                    self.partial = False
                    self.countdown = 1  # the rest of the write fails
                    return super().pwrite(fd, memoryview(data)[: len(data) // 2], pos)
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return super().pwrite(fd, data, pos)


def bodies(store: MessageStore, topic: str = "T") -> list[bytes]:
    r = store.reads.get_messages(topic, 0, 0, 1000)
    return [m.body for m in decode_records(r.data)] if r.status is GetStatus.FOUND else []


@pytest.mark.parametrize("case", ["log_write", "log_partial_write", "queue_write"])
def test_injected_enospc(tmp_path: Path, case: str) -> None:
    io = FailingIO()
    s = open_store(tmp_path / "s", file_io=io)
    try:
        for i in range(5):
            assert s.put_messages([msg(body=b"ok%d" % i)]).status is PutStatus.PUT_OK
        end, max_q = s.max_phy_offset, s.reads.get_max_offset("T", 0)
        if case == "log_write":
            io.arm(1)
        elif case == "log_partial_write":
            io.arm(1, partial=True)
        else:
            io.arm(2)  # the commit-log write succeeds, the consume-queue write fails
        res = s.put_messages([msg(body=b"lost-1"), msg(body=b"lost-2")])
        assert res.status is PutStatus.DISK_FULL
        assert "no space left" in res.reason and res.messages == []
        assert (s.max_phy_offset, s.reads.get_max_offset("T", 0)) == (end, max_q)
        assert bodies(s) == [b"ok%d" % i for i in range(5)]
        image = crash_image(s, tmp_path / "img")  # no half-batch may survive a crash either
        res = s.put_messages([msg(body=b"resumed")])
        assert res.status is PutStatus.PUT_OK
        assert (res.messages[0].phys_offset, res.messages[0].queue_offset) == (end, max_q)
        assert bodies(s)[-1] == b"resumed"
    finally:
        s.shutdown()
    r = open_store(image)
    try:
        assert bodies(r) == [b"ok%d" % i for i in range(5)]
        assert r.max_phy_offset == end
    finally:
        r.shutdown()


def test_real_enospc_on_small_tmpfs(tmp_path: Path) -> None:
    with small_tmpfs(tmp_path / "mnt", "8m") as mnt:
        # Usage reported as 0 so the refuse ratio cannot pre-empt the real ENOSPC under test
        # (the maintenance thread samples usage and could otherwise win the race).
        s = open_store(mnt / "store", commitlog_segment_size=1 << 20, disk_usage=lambda _: 0.0)
        try:
            acked: list[tuple[int, bytes]] = []
            status = PutStatus.PUT_OK
            n = 0
            while status is PutStatus.PUT_OK:
                n += 1
                body = os.urandom(3000) + n.to_bytes(4, "big")
                res = s.put_messages([msg(body=body), msg(body=body[::-1])])
                status = res.status
                if status is PutStatus.PUT_OK:
                    acked += [(res.messages[0].phys_offset, body),
                              (res.messages[1].phys_offset, body[::-1])]
                assert n < 10_000
            assert status is PutStatus.DISK_FULL, res.reason
            assert "no space left" in res.reason
            assert len(acked) > 1000
            end = s.max_phy_offset
            for phys, body in acked:
                raw = s.reads.read_record(phys)
                assert raw is not None and decode_records(raw)[0].body == body
            # the same batch is refused again while full, without moving anything (a smaller
            # one may still fit in what is left of the last block)
            assert s.put_messages([msg(body=body), msg(body=body[::-1])]).status is PutStatus.DISK_FULL
            assert s.max_phy_offset == end
            # space comes back: drop the oldest segments as retention would
            s.retention.run_cleanup(now_ms=2**62)
            res = s.put_messages([msg(body=b"after")])
            assert res.status is PutStatus.PUT_OK, res.reason
            assert res.messages[0].phys_offset >= end
        finally:
            s.shutdown()
        r = open_store(mnt / "store", commitlog_segment_size=1 << 20)
        try:
            assert not r.recovered_abnormally
            raw = r.reads.read_record(acked[-1][0])
            assert raw is not None and decode_records(raw)[0].body == acked[-1][1]
        finally:
            r.shutdown()
