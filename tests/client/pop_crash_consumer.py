"""A simple consumer in its own process, for the kill -9 scenario: receives in batches and
acknowledges one message at a time, printing `RECV queue offset` when a message is received
and `ACK queue offset` once its acknowledgement was answered."""

from __future__ import annotations

import sys
import time

from ferrymq import SimpleConsumer

namesrv, topic, group, invisible = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])

consumer = SimpleConsumer(group, namesrv, await_duration=1.0, route_refresh_interval=0.3)
consumer.subscribe(topic)
consumer.start()
print("READY", flush=True)
while True:
    views = consumer.receive(8, invisible)
    for v in views:
        print("RECV", v.message.queue_id, v.queue_offset, flush=True)
    for v in views:
        time.sleep(0.003)  # work
        consumer.ack(v)
        print("ACK", v.message.queue_id, v.queue_offset, flush=True)
