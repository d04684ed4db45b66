"""WIPE_WRITE_PERM_OF_BROKER / ADD_WRITE_PERM_OF_BROKER in the route registry: the wipe holds
across the broker's periodic registrations, and adding writes back restores each topic's own
perm (a read-only topic stays read-only)."""

from __future__ import annotations

from typing import Any

from ferrymq.namesrv.routes import RouteRegistry


def _register(reg: RouteRegistry, name: str, perms: dict[str, int]) -> None:
    table = {t: {"topicName": t, "readQueueNums": 2, "writeQueueNums": 2, "perm": p} for t, p in perms.items()}
    reg.register_broker(cluster="C", broker_addr=f"{name}:1", broker_name=name, broker_id=0, ha_server_addr="",
                        topic_config={"dataVersion": {"counter": 1, "timestamp": 1}, "topicConfigTable": table})


def _perms(reg: RouteRegistry, topic: str) -> dict[str, int]:
    route: Any = reg.route(topic)
    return {q["brokerName"]: q["perm"] for q in route["queueDatas"]}


def test_wiped_writes_survive_registration_and_come_back_as_each_topic_had_them() -> None:
    reg = RouteRegistry()
    _register(reg, "a", {"orders": 6, "audit": 4})
    _register(reg, "b", {"orders": 6})
    assert reg.wipe_write_perm("a") == 2
    assert _perms(reg, "orders") == {"a": 4, "b": 6}
    _register(reg, "a", {"orders": 6, "audit": 4})  # the broker's next registration
    assert _perms(reg, "orders") == {"a": 4, "b": 6}
    assert reg.add_write_perm("a") == 2
    assert _perms(reg, "orders") == {"a": 6, "b": 6}
    assert _perms(reg, "audit") == {"a": 4}
    assert reg.wipe_write_perm("unknown") == 0
