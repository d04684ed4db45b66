"""A name server and brokers in this process, over real sockets and files: what the broker
tests that need several brokers (a master and its slave) start."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from wire_util import Wire

from ferrymq.broker.config import BrokerConfig
from ferrymq.broker.controller import Broker
from ferrymq.namesrv.server import NameServer, NamesrvConfig


class Group:
    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.namesrv = NameServer(NamesrvConfig(port=0))
        self.brokers: list[Broker] = []
        self.wires: list[Wire] = []

    async def broker(self, name: str, **config: Any) -> Broker:
        values: dict[str, Any] = dict(ha_heartbeat_interval_ms=100, ha_slave_sync_interval_ms=200,
                                      sync_flush_timeout_ms=1000)
        values.update(config)
        cfg = BrokerConfig(store_dir=self.tmp / name, listen_port=0, namesrv_addr=self.namesrv.address,
                           **values)
        b = Broker(cfg)
        await b.start()
        await b.register_once()
        self.brokers.append(b)
        return b

    def wire(self, broker: Broker) -> Wire:
        w = Wire(self.namesrv.address, broker.addr)
        self.wires.append(w)
        return w

    async def close(self) -> None:
        for w in self.wires:
            await w.close()
        for b in reversed(self.brokers):
            await b.stop()
        await self.namesrv.stop()
