"""Name server address lists as users and RocketMQ's tools write them: `host:port` entries
separated by ';' (RocketMQ's separator) or ','.

Here rather than in the client, which connects to them: the Spark connector checks the
`namesrv` option in processes that never open a connection and need not load the client."""

from __future__ import annotations


def split_addrs(text: str) -> list[str]:
    return [a.strip() for a in text.replace(",", ";").split(";") if a.strip()]
