from __future__ import annotations

from pathlib import Path

from ferrymq.broker.clients import QueueLocks, parse_subscription
from ferrymq.broker.offsets import OffsetManager
from ferrymq.common.names import java_string_hash


def test_subscription_matches_tag_hashes() -> None:
    sub = parse_subscription("t", "TagA || TagB")
    assert sub.tags == {"TagA", "TagB"}
    assert sub.accepts(java_string_hash("TagA"))
    assert not sub.accepts(java_string_hash("TagC"))
    everything = parse_subscription("t", "*")
    assert everything.matches_all and everything.accepts(12345)


def test_offsets_persist_in_rocketmq_shape_and_keep_ack_ranges(tmp_path: Path) -> None:
    m = OffsetManager(tmp_path)
    m.commit("g", "t", 0, 2101, acked=[(2102, 2201)])
    m.commit("g", "t", 1, 7)
    assert m.persist()
    text = (tmp_path / "consumerOffset.json").read_text()
    assert '"offsetTable":{"t@g":{0:2101,1:7}}' in text
    again = OffsetManager(tmp_path)
    again.load()
    assert again.query("g", "t", 0) == 2101
    assert again.progress("g", "t", 0).acked == [(2102, 2201)]  # type: ignore[union-attr]
    assert again.query("g", "t", 5) == -1
    assert again.query("other", "t", 0) == -1


def test_commit_past_ack_ranges_drops_them(tmp_path: Path) -> None:
    m = OffsetManager(tmp_path)
    m.commit("g", "t", 0, 10, acked=[(12, 15), (20, 30)])
    m.commit("g", "t", 0, 16)
    assert m.progress("g", "t", 0).acked == [(20, 30)]  # type: ignore[union-attr]


def test_queue_lock_lease_expires_for_dead_holder() -> None:
    locks = QueueLocks(lease_ms=60_000)
    mq = ("t", "b", 0)
    assert locks.try_lock_batch("g", "c1", [mq], now_ms=0) == [mq]
    assert locks.try_lock_batch("g", "c2", [mq], now_ms=30_000) == []
    assert locks.try_lock_batch("g", "c1", [mq], now_ms=50_000) == [mq]  # renewal
    assert locks.try_lock_batch("g", "c2", [mq], now_ms=100_000) == []
    assert locks.try_lock_batch("g", "c2", [mq], now_ms=110_001) == [mq]
    assert locks.holder("g", mq, 110_001) == "c2"
