"""What the operations commands of the admin client return: brokers with their runtime
state, and a topic's change on each broker."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..common import jsonx
from ..common.trace_events import TraceEvent

# GET_BROKER_RUNTIME_INFO keys shown as columns (RocketMQ's clusterList shows a similar few).
RUNTIME_SUMMARY = (
    "brokerVersionDesc",
    "bootTimestamp",
    "commitLogMaxOffset",
    "commitLogDiskRatio",
    "topicCount",
    "consumerGroupCount",
)


@dataclass(frozen=True, slots=True)
class BrokerStatus:
    """One broker (master or slave) as the name server lists it, with its runtime table, or
    the reason that table could not be read."""

    cluster: str
    broker: str
    broker_id: int
    addr: str
    runtime: dict[str, str] = field(default_factory=dict)
    error: str | None = None

    @property
    def role(self) -> str:
        """MASTER or SLAVE, from the broker id the name server lists it under."""
        return "MASTER" if self.broker_id == 0 else "SLAVE"

    @property
    def broker_role(self) -> str | None:
        """What the broker says it is (ASYNC_MASTER, SYNC_MASTER, SLAVE, UNDECIDED); None when
        its runtime table could not be read or predates replication."""
        return self.runtime.get("brokerRole")

    @property
    def replication(self) -> Replication:
        return Replication.from_runtime(self.runtime)

    def to_json(self) -> dict[str, Any]:
        return {
            "cluster": self.cluster,
            "broker": self.broker,
            "broker_id": self.broker_id,
            "role": self.role,
            "broker_role": self.broker_role,
            "addr": self.addr,
            "replication": self.replication.to_json(),
            "runtime": dict(self.runtime),
            "error": self.error,
        }


@dataclass(frozen=True, slots=True)
class Replication:
    """A broker's replication state from its runtime table (docs/replication.md): a master's
    HA address, in-sync slaves and per-slave lag; a slave's lag behind its master and whether
    it is connected. Fields a broker does not report are None."""

    ha_addr: str | None = None
    in_sync_slaves: tuple[int, ...] | None = None
    ha_slaves: tuple[dict[str, Any], ...] | None = None
    lag_bytes: int | None = None
    lag_ms: int | None = None
    connected: bool | None = None

    @classmethod
    def from_runtime(cls, runtime: dict[str, str]) -> Replication:
        in_sync = runtime.get("inSyncSlaves")
        connected = runtime.get("haConnected")
        return cls(
            ha_addr=runtime.get("haListenAddr") or None,
            in_sync_slaves=None if in_sync is None else tuple(
                int(i) for i in in_sync.split(",") if i.strip().lstrip("-").isdigit()
            ),
            ha_slaves=_ha_slaves(runtime.get("haSlaves")),
            lag_bytes=_int(runtime.get("slaveLagBytes")),
            lag_ms=_int(runtime.get("slaveLagMs")),
            connected=None if connected is None else connected == "true",
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "ha_addr": self.ha_addr,
            "in_sync_slaves": None if self.in_sync_slaves is None else list(self.in_sync_slaves),
            "ha_slaves": None if self.ha_slaves is None else [dict(s) for s in self.ha_slaves],
            "slave_lag_bytes": self.lag_bytes,
            "slave_lag_ms": self.lag_ms,
            "ha_connected": self.connected,
        }


def _int(value: str | None) -> int | None:
    try:
        return None if value is None else int(value)
    except ValueError:
        return None


def _ha_slaves(value: str | None) -> tuple[dict[str, Any], ...] | None:
    """The master's `haSlaves` JSON list; None when absent or not a list of objects."""
    if value is None:
        return None
    try:
        parsed = jsonx.loads(value)
    except ValueError:
        return None
    if not isinstance(parsed, list) or not all(isinstance(s, dict) for s in parsed):
        return None
    return tuple(parsed)


@dataclass(frozen=True, slots=True)
class MessageTrack:
    """Where one group stands with one stored message (RocketMQ's MessageTrack): CONSUMED,
    CONSUMED_BUT_FILTERED (its subscription skips the tag), NOT_CONSUME_YET, PULL (a pull
    consumer: its progress is its own), NOT_ONLINE (no member connected; `consumed` still
    says what the committed offset shows)."""

    topic: str
    queue_id: int
    queue_offset: int
    group: str
    track: str
    consumed: bool
    consumer_offset: int

    def to_json(self) -> dict[str, Any]:
        return {
            "topic": self.topic,
            "queue_id": self.queue_id,
            "queue_offset": self.queue_offset,
            "group": self.group,
            "track": self.track,
            "consumed": self.consumed,
            "consumer_offset": self.consumer_offset,
        }


@dataclass(frozen=True, slots=True)
class MessageTrace:
    """A message's recorded life over every broker (docs/trace.md): `events` oldest first;
    `trace_enable` per broker asked (False: that broker records nothing new, or could not be
    asked: then `errors` says why)."""

    msg_id: str
    events: tuple[TraceEvent, ...]
    trace_enable: dict[str, bool] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "msg_id": self.msg_id,
            "trace_enable": dict(self.trace_enable),
            "errors": dict(self.errors),
            "events": [e.to_json() for e in self.events],
        }


def parse_message_trace(body: bytes) -> tuple[str, bool, list[TraceEvent]]:
    """(broker, trace enabled, events) of a QUERY_MESSAGE_TRACE answer."""
    doc = jsonx.loads(body or b"{}")
    if not isinstance(doc, dict):
        raise ValueError("message trace answer is not a JSON object")
    events = [TraceEvent.from_json(e) for e in doc.get("events") or [] if isinstance(e, dict)]
    return str(doc.get("broker", "")), bool(doc.get("traceEnable", False)), events
