"""The workload and checker end to end against one real broker, no faults: a clean run checks
clean, and messages made unreachable for the consumer (its offsets moved past them) are
reported lost, with their window."""

from __future__ import annotations

from typing import Any

from workload import Workload, WorkloadConfig

from ferrymq import AdminClient


def test_a_clean_run_checks_clean(standalone: Any) -> None:
    workload = Workload(standalone.namesrv, WorkloadConfig(topic="w-clean", group="w-clean-g"))
    try:
        workload.create_topic()
        workload.start_consumer()
        workload.start_producers()
        assert workload.wait_acked(200, 30)
        workload.stop_producers()
        assert workload.drain(30)
        result = workload.result()
    finally:
        workload.close()
    assert result.ok, result.summary()
    assert result.acked > 200 and result.lost == () and result.window is None
    assert result.received >= result.acked


def test_messages_skipped_by_the_consumer_are_reported_lost(standalone: Any) -> None:
    config = WorkloadConfig(topic="w-skip", group="w-skip-g")
    workload = Workload(standalone.namesrv, config)
    try:
        workload.create_topic()
        workload.start_producers()
        assert workload.wait_acked(100, 30)
        workload.mark("offsets moved to the end")
        with AdminClient(standalone.namesrv) as admin:
            for mq in admin.message_queues(config.topic):
                admin.update_consumer_offset(config.group, mq, admin.max_offset(mq))
        workload.start_consumer()
        assert workload.wait_acked(workload.acked_count() + 50, 30)
        workload.stop_producers()
        assert not workload.drain(2.0)  # what was skipped never arrives
        result = workload.result()
    finally:
        workload.close()
    assert not result.ok and len(result.lost) >= 100, result.summary()
    assert result.window is not None and result.window.lost == len(result.lost)
    assert result.window.acked_in_window >= len(result.lost)
    assert workload.timeline()[0][1] == "offsets moved to the end"
