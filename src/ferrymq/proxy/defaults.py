"""The proxy's defaults that its command line shows, in a module that imports nothing, so the
CLI can show them without loading the proxy."""

from __future__ import annotations

# How long sends pass over a broker group after a send to it failed or timed out (RocketMQ 5's
# MQFaultStrategy isolates a broker for its not-available time of a 10 s latency).
SEND_ISOLATION_S = 10.0

# How long a topic's route is used before it is fetched again from the name server (in the
# background: the kept one serves meanwhile), as RocketMQ's proxy refreshes its route cache.
ROUTE_REFRESH_S = 5.0
