"""Where a DLQ re-drive stands after some messages were sent: the offset moves over every
handled run that starts at it; what was sent beyond a gap is kept as acknowledged ranges."""

from __future__ import annotations

from ferrymq.client.dlq import QueueProgress, advance


def test_sent_out_of_order_is_kept_as_ranges_above_the_offset() -> None:
    assert advance(QueueProgress(10, []), {12, 13}) == (10, [(12, 14)])


def test_the_offset_moves_over_sent_and_already_acknowledged_runs() -> None:
    state = QueueProgress(10, [(12, 14), (20, 21)])
    assert advance(state, {10, 11}) == (14, [(20, 21)])
    assert advance(state, {10, 11, 14, 15, 16, 17, 18, 19}) == (21, [])


def test_handled_covers_below_the_offset_and_inside_ranges() -> None:
    state = QueueProgress(10, [(12, 14)])
    assert [o for o in range(9, 16) if state.handled(o)] == [9, 12, 13]
