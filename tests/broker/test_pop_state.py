"""The pop state machine on its own: leases, deadlines, acknowledged ranges, the in-flight
bound and orderly locking, with time given as numbers."""

from __future__ import annotations

import pytest

from ferrymq.broker.pop.state import AckOutcome, Candidate, ChangeOutcome, Lease, QueuePop
from ferrymq.common.popinfo import (
    ExtraInfo,
    decode_bitset,
    encode_bitset,
    parse_extra_info,
    parse_msg_offset_info,
    parse_order_count_info,
    parse_start_offset_info,
)


def _offsets(cands: list[Candidate]) -> list[int]:
    return [c.offset for c in cands]


def _hand_out(st: QueuePop, now: int, n: int, max_offset: int, invisible: int = 100,
              order: bool = False) -> list[int]:
    got = st.candidates(now, n, max_offset, order=order)
    for c in got:
        st.lease(c.offset, now, invisible)
    return _offsets(got)


def test_handed_out_once_until_acked_or_expired() -> None:
    st = QueuePop(0)
    assert _hand_out(st, 0, 3, 10) == [0, 1, 2]
    assert _hand_out(st, 50, 3, 10) == [3, 4, 5]  # the first three are invisible
    assert st.ack(1) is AckOutcome.ACKED
    assert st.ack(1) is AckOutcome.ALREADY
    # At 100 the leases of 0 and 2 expire (1 is acknowledged): they come first, counted.
    got = st.candidates(100, 4, 10, order=False)
    assert [(c.offset, c.attempts) for c in got] == [(0, 1), (2, 1), (6, 0), (7, 0)]


def test_committed_moves_to_lowest_unacked() -> None:
    st = QueuePop(5)
    _hand_out(st, 0, 4, 20)  # 5..8
    st.ack(6)
    st.ack(8)
    assert (st.committed, st.acked) == (5, [(6, 7), (8, 9)])
    st.ack(5)
    assert (st.committed, st.acked) == (7, [(8, 9)])
    st.ack(7)
    assert (st.committed, st.acked) == (9, [])


def test_rebuilt_state_skips_acked_and_redelivers_the_rest() -> None:
    # After a restart: committed 3 and ranges [4,6), [7,8) acknowledged.
    st = QueuePop(3, [(4, 6), (7, 8)])
    assert _hand_out(st, 0, 10, 10) == [3, 6, 8, 9]


def test_restored_leases_stay_invisible_and_leave_no_gap() -> None:
    # After a restart: committed 3, [4,5) acknowledged; leases of 5 and 7 checkpointed (7's
    # deadline at 50, 5's at 200), 6 and 8 never handed out (their checkpoints replayed from
    # a later start, or never written), 4 acknowledged after its checkpoint.
    st = QueuePop(3, [(4, 5)])
    assert st.restore(Lease(4, 0, 200, 1)) is False
    assert st.restore(Lease(5, 0, 200, 1)) and st.restore(Lease(7, 0, 50, 2))
    assert _hand_out(st, 10, 10, 10) == [3, 6, 8, 9]  # the restored leases passed over
    # At 60 the lease of 7 expires: handed out again with its count, `pos` not moved past
    # offsets the walk has not reached.
    st2 = QueuePop(3, [(4, 5)])
    st2.restore(Lease(5, 0, 200, 1))
    st2.restore(Lease(7, 0, 50, 2))
    got = st2.candidates(60, 1, 10, order=False)
    assert [(c.offset, c.attempts) for c in got] == [(7, 2)]
    st2.lease(7, 60, 100)
    assert _hand_out(st2, 61, 10, 10) == [3, 6, 8, 9]
    assert st2.change(5, 0, 61, 500) is ChangeOutcome.CHANGED  # the handle from before


def test_inflight_bound() -> None:
    st = QueuePop(0, max_inflight=3)
    assert _hand_out(st, 0, 10, 100) == [0, 1, 2]
    assert _hand_out(st, 1, 10, 100) == []
    st.ack(0)
    assert _hand_out(st, 2, 10, 100) == [3]
    # Expired leases are handed out again without counting against the bound twice.
    assert _offsets(st.candidates(1000, 10, 100, order=False)) == [1, 2, 3]


def test_orderly_waits_for_the_whole_batch() -> None:
    st = QueuePop(0)
    assert _hand_out(st, 0, 2, 10, order=True) == [0, 1]
    assert _hand_out(st, 10, 2, 10, order=True) == []  # locked while 0 and 1 are invisible
    st.ack(0)
    assert _hand_out(st, 20, 2, 10, order=True) == []
    st.ack(1)
    assert _hand_out(st, 30, 2, 10, order=True) == [2, 3]
    st.ack(2)
    # 3 expires unacknowledged: it comes again before 4.
    assert _hand_out(st, 200, 2, 10, order=True) == [3, 4]
    assert st.leases[3].attempts == 2


def test_change_invisible() -> None:
    st = QueuePop(0)
    _hand_out(st, 0, 1, 10, invisible=100)
    assert st.change(0, 999, 50, 500) is ChangeOutcome.STALE
    assert st.change(0, 0, 50, 500) is ChangeOutcome.CHANGED
    assert _hand_out(st, 200, 1, 1) == []  # still invisible: deadline 550
    assert _hand_out(st, 550, 1, 1) == [0]
    assert st.change(0, 50, 600, 10) is ChangeOutcome.STALE  # handed out again at 550
    st.ack(0)
    assert st.change(0, 550, 600, 10) is ChangeOutcome.NOT_IN_FLIGHT


def test_skip_below_and_ack_above_pos() -> None:
    st = QueuePop(0)
    _hand_out(st, 0, 2, 10)
    st.ack(5)  # a handle from before a restart, above what was handed out since
    assert st.skip_below(3)
    assert (st.committed, st.leases, st.acked) == (3, {}, [(5, 6)])
    assert _hand_out(st, 0, 10, 8) == [3, 4, 6, 7]


def test_invalid_bound() -> None:
    with pytest.raises(ValueError):
        QueuePop(0, max_inflight=0)


def test_extra_info_round_trip() -> None:
    info = ExtraInfo(10, 1_700_000_000_000, 30_000, 0, "0", "broker-a", 2, 12)
    assert parse_extra_info(info.encode()) == info
    assert info.encode() == "10 1700000000000 30000 0 0 broker-a 2 12"
    seven = parse_extra_info("10 5 6 999 0 broker-a 2")
    assert seven.queue_offset == -1 and seven.order


def test_offset_infos_parse_as_rocketmq_keys_them() -> None:
    assert parse_start_offset_info("0 1 5;0 3 7") == {"0@1": 5, "0@3": 7}
    assert parse_msg_offset_info("0 1 5,6,9") == {"0@1": [5, 6, 9]}
    assert parse_order_count_info("0 qo1%5 2") == {"0@qo1%5": 2}


def test_bitset_is_java_bitset_bytes() -> None:
    # java.util.BitSet {0, 3, 9}.toByteArray() == [0x09, 0x02]
    assert encode_bitset([0, 3, 9]) == "CQI="
    assert decode_bitset("CQI=") == [0, 3, 9]
