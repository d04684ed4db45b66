"""A client's shutdown says nothing alarming about brokers that cannot hear its goodbye: one
that died has dropped the client along with its connections."""

from __future__ import annotations

import logging
import signal
from typing import Any

import pytest
from scenario_util import FAST_PRODUCER

from ferrymq import Message, Producer


def test_shutdown_after_the_broker_died_does_not_warn_about_unregistering(
    standalone: Any, caplog: pytest.LogCaptureFixture
) -> None:
    producer = Producer("gone-broker-p", standalone.namesrv, **FAST_PRODUCER).start()
    try:
        producer.send(Message("gone-broker-t", b"one"))
        standalone.stop(signal.SIGKILL)
        with caplog.at_level(logging.DEBUG, logger="ferrymq.client"):
            producer.shutdown()
    finally:
        producer.shutdown()
    unregisters = [r for r in caplog.records if r.getMessage().startswith("unregister ")]
    # The attempt was made and failed (so the test saw the path it is about), quietly.
    assert unregisters and all(r.levelno == logging.DEBUG for r in unregisters)
