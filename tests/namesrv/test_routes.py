from __future__ import annotations

from ferrymq.namesrv.routes import RouteRegistry


def _wrapper(*topics: str, queues: int = 4) -> dict[str, object]:
    return {
        "dataVersion": {"counter": 1, "timestamp": 1},
        "topicConfigTable": {
            t: {"topicName": t, "readQueueNums": queues, "writeQueueNums": queues, "perm": 6} for t in topics
        },
    }


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000

    def __call__(self) -> int:
        return self.now


def test_route_lists_queue_and_broker_data_for_registered_topic() -> None:
    reg = RouteRegistry()
    reg.register_broker(cluster="C", broker_addr="127.0.0.1:10911", broker_name="b", broker_id=0,
                        ha_server_addr="", topic_config=_wrapper("orders"))
    route = reg.route("orders")
    assert route is not None
    assert route["queueDatas"] == [
        {"brokerName": "b", "perm": 6, "readQueueNums": 4, "topicSysFlag": 0, "writeQueueNums": 4}
    ]
    assert route["brokerDatas"] == [{"brokerAddrs": {"0": "127.0.0.1:10911"}, "brokerName": "b", "cluster": "C"}]
    assert reg.route("unknown") is None


def test_silent_broker_is_dropped_after_expiry() -> None:
    clock = Clock()
    reg = RouteRegistry(broker_expire_ms=120_000, clock=clock)
    reg.register_broker(cluster="C", broker_addr="a:1", broker_name="b", broker_id=0,
                        ha_server_addr="", topic_config=_wrapper("t"))
    clock.now += 119_000
    assert reg.scan_not_active() == []
    assert reg.route("t") is not None
    clock.now += 2_000
    assert reg.scan_not_active() == ["a:1"]
    assert reg.route("t") is None
    assert reg.cluster_info() == {"brokerAddrTable": {}, "clusterAddrTable": {}}


def test_heartbeat_keeps_broker_alive() -> None:
    clock = Clock()
    reg = RouteRegistry(broker_expire_ms=120_000, clock=clock)
    for _ in range(5):
        reg.register_broker(cluster="C", broker_addr="a:1", broker_name="b", broker_id=0,
                            ha_server_addr="", topic_config=_wrapper("t"))
        clock.now += 60_000
    assert reg.scan_not_active() == []


def test_topic_removed_from_master_disappears_from_routes() -> None:
    reg = RouteRegistry()
    reg.register_broker(cluster="C", broker_addr="a:1", broker_name="b", broker_id=0,
                        ha_server_addr="", topic_config=_wrapper("t1", "t2"))
    reg.register_broker(cluster="C", broker_addr="a:1", broker_name="b", broker_id=0,
                        ha_server_addr="", topic_config=_wrapper("t1"))
    assert reg.topic_list() == ["t1"]


def test_two_brokers_share_a_topic_and_unregister_removes_one() -> None:
    reg = RouteRegistry()
    for name, addr in (("b1", "a:1"), ("b2", "a:2")):
        reg.register_broker(cluster="C", broker_addr=addr, broker_name=name, broker_id=0,
                            ha_server_addr="", topic_config=_wrapper("t"))
    route = reg.route("t")
    assert route is not None and [b["brokerName"] for b in route["brokerDatas"]] == ["b1", "b2"]
    reg.unregister_broker(cluster="C", broker_addr="a:1", broker_name="b1", broker_id=0)
    route = reg.route("t")
    assert route is not None and [b["brokerName"] for b in route["brokerDatas"]] == ["b2"]
    assert reg.cluster_info()["clusterAddrTable"] == {"C": ["b2"]}


def test_slave_registration_learns_master_address() -> None:
    reg = RouteRegistry()
    reg.register_broker(cluster="C", broker_addr="m:1", broker_name="b", broker_id=0,
                        ha_server_addr="m:2", topic_config=_wrapper("t"))
    result = reg.register_broker(cluster="C", broker_addr="s:1", broker_name="b", broker_id=1,
                                 ha_server_addr="s:2", topic_config=_wrapper("t"))
    assert result.master_addr == "m:1"
    assert result.ha_server_addr == "m:2"


def test_drop_master_keeps_slaves_and_new_master_replaces_its_slave_entry() -> None:
    reg = RouteRegistry()
    reg.register_broker(cluster="C", broker_addr="a:1", broker_name="b", broker_id=0,
                        ha_server_addr="", topic_config=_wrapper("t"))
    reg.register_broker(cluster="C", broker_addr="a:2", broker_name="b", broker_id=2,
                        ha_server_addr="", topic_config=_wrapper("t"))
    assert not reg.drop_master("b", "a:2")  # not the master
    assert reg.drop_master("b", "a:1")
    route = reg.route("t")
    assert route is not None and route["brokerDatas"][0]["brokerAddrs"] == {"2": "a:2"}
    reg.register_broker(cluster="C", broker_addr="a:2", broker_name="b", broker_id=0,
                        ha_server_addr="", topic_config=_wrapper("t"))
    route = reg.route("t")
    assert route is not None and route["brokerDatas"][0]["brokerAddrs"] == {"0": "a:2"}
    # The last address of a group: the group and its topics go, as when a broker disconnects.
    assert reg.drop_master("b", "a:2")
    assert reg.route("t") is None and reg.cluster_info() == {"brokerAddrTable": {}, "clusterAddrTable": {}}
