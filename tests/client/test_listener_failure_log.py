"""A listener that raises is logged as one line per failure (its traceback only at debug
level): a poison backlog must not flood the log with a traceback per message."""

from __future__ import annotations

import logging
import threading
from typing import Any

import pytest
from scenario_util import FAST_CONSUMER, FAST_PRODUCER

from ferrymq import ConsumeFromWhere, Message, MessageExt, Producer, PushConsumer
from waits import wait_until


def test_a_raising_listener_logs_one_line_without_traceback(
    standalone: Any, caplog: pytest.LogCaptureFixture
) -> None:
    with Producer("lf-p", standalone.namesrv, **FAST_PRODUCER) as producer:
        sent = producer.send(Message("lf-topic", b"poison"))
    calls = threading.Event()

    def listener(msgs: list[MessageExt], ctx: object) -> None:
        calls.set()
        raise ValueError("cannot parse order 42")

    consumer = PushConsumer(
        "lf-g",
        standalone.namesrv,
        consume_from_where=ConsumeFromWhere.FIRST_OFFSET,
        **FAST_CONSUMER,
    )
    consumer.subscribe("lf-topic")
    consumer.register_listener(listener)
    with caplog.at_level(logging.WARNING, logger="ferrymq.client.listener"), consumer:
        wait_until(calls.is_set, what="the listener to run")
        records = wait_until(
            lambda: [r for r in caplog.records if r.name == "ferrymq.client.listener"],
            what="the failure to be logged",
        )
    record = records[0]
    text = record.getMessage()
    assert record.levelno == logging.WARNING and record.exc_info is None
    assert "\n" not in text
    assert "ValueError" in text and "cannot parse order 42" in text and sent.msg_id in text
