"""What a producer says when it cannot do what it was asked: each error names the real cause."""

from __future__ import annotations

import logging
import os
import re
import subprocess
import sys
import textwrap
from typing import Any

import pytest
from scenario_util import FAST_PRODUCER

from ferrymq import Message, Producer
from ferrymq.client.errors import (
    ClientStateError,
    MessageValidationError,
    NameServerUnreachableError,
    NoRouteError,
)
from ferrymq.client.producer_async import AsyncProducer

# The tests here each use their own topics and groups: one server serves the module.
pytestmark = pytest.mark.shared_standalone


def test_sending_after_shutdown_says_the_producer_is_shut_down(standalone: Any) -> None:
    producer = Producer("closed-p", standalone.namesrv, **FAST_PRODUCER).start()
    producer.send(Message("closed", b"a"))
    producer.shutdown()
    for attempt in (lambda: producer.send(Message("closed", b"a")),
                    lambda: producer.send_batch([Message("closed", b"a")]),
                    lambda: producer.send_async(Message("closed", b"a"))):
        with pytest.raises(ClientStateError, match="Producer is shut down; cannot send"):
            attempt()


def test_a_message_the_broker_would_refuse_for_size_is_refused_before_sending() -> None:
    producer = AsyncProducer("size-p", "127.0.0.1:1")
    limit = producer.max_message_size
    # incompressible and just under the body limit: the stored record is over the broker's
    with pytest.raises(MessageValidationError, match="stored message would be"):
        producer._prepare(Message("t", os.urandom(limit - 10)))
    # compressible: it shrinks below the limit and goes
    assert len(producer._prepare(Message("t", b"x" * (limit - 10))).body) < limit // 100


def test_a_delay_level_beyond_the_brokers_levels_is_refused() -> None:
    producer = AsyncProducer("delay-p", "127.0.0.1:1")
    with pytest.raises(MessageValidationError, match=r"is 99; the broker has levels 1\.\.18"):
        producer._prepare(Message("t", b"x", delay_level=99))
    producer._prepare(Message("t", b"x", delay_level=18))
    more = AsyncProducer("delay-p2", "127.0.0.1:1", delay_levels=99)
    more._prepare(Message("t", b"x", delay_level=99))


def test_an_unreachable_name_server_is_named_at_start_and_at_send(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="ferrymq.client.producer"):
        producer = Producer("dead-ns", "127.0.0.1:1", send_timeout=0.5).start()
    try:
        assert any("name server 127.0.0.1:1 is unreachable" in r.getMessage() for r in caplog.records)
        unreachable = re.escape("name server 127.0.0.1:1 is unreachable")
        with pytest.raises(NameServerUnreachableError, match=unreachable) as info:
            producer.send(Message("t", b"x"))
        assert isinstance(info.value, NoRouteError)  # code handling a missing route still works
        assert info.value.retriable
    finally:
        producer.shutdown()


def test_running_out_of_file_descriptors_is_reported_as_such(standalone: Any) -> None:
    child = textwrap.dedent(f"""
        import resource, sys
        from ferrymq import Message, Producer
        from ferrymq import FerryMQError
        producer = Producer("fd-p", {standalone.namesrv!r}, send_timeout=1.0).start()
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (64, hard))
        hog = []
        try:
            while True:
                hog.append(open("/dev/null"))
        except OSError:
            pass
        try:
            producer.send(Message("fd-topic", b"x"))
        except FerryMQError as exc:
            print("ERROR", exc)
        else:
            print("SENT")
        for f in hog:
            f.close()
        producer.shutdown()
    """)
    out = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, timeout=60)
    assert "ERROR" in out.stdout, out.stdout + out.stderr
    assert "out of file descriptors" in out.stdout
