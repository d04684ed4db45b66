"""Paths in the public API are taken as text or any path-like object and held as Path: the
configs of the broker, name server, store and consumers, and the embedded servers."""

from __future__ import annotations

import dataclasses
import os
import pickle
from pathlib import Path

from ferrymq.broker.config import BrokerConfig, load_config
from ferrymq.broker.controller import Broker
from ferrymq.client.consumer.options import ConsumerOptions
from ferrymq.common.paths import as_path
from ferrymq.embedded import start_cluster
from ferrymq.namesrv.server import NameServer, NamesrvConfig
from ferrymq.store.config import StoreConfig


class _PathLike(os.PathLike[str]):
    """A path-like object that is not a Path (nor a str)."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __fspath__(self) -> str:
        return self.path

    def __repr__(self) -> str:
        return f"<_PathLike {self.path}>"


def test_config_paths_given_as_text_or_path_like_are_paths() -> None:
    for given in ("data/x", Path("data/x"), _PathLike("data/x")):
        cfg = BrokerConfig(store_dir=given)
        assert type(cfg.store_dir) is not str and cfg.store_dir == Path("data/x")
        assert cfg == BrokerConfig(store_dir=Path("data/x"))
        assert hash(cfg) == hash(BrokerConfig(store_dir=Path("data/x")))
        assert StoreConfig(given).root == Path("data/x")
        assert ConsumerOptions(offset_store_dir=given).offsets_dir() == Path("data/x")
        ns = NamesrvConfig(controller_dir=given, acl_file=given)
        assert (ns.controller_dir, ns.acl_file) == (Path("data/x"), Path("data/x"))
    assert as_path(_PathLike("y")) == Path("y")
    # Defaults, copies and pickles keep Paths.
    assert BrokerConfig().store_dir == Path("ferrymq-data")
    assert NamesrvConfig().controller_dir == Path("ferrymq-controller") and NamesrvConfig().acl_file is None
    assert ConsumerOptions().offset_store_dir is None
    assert ConsumerOptions().offsets_dir() == Path.home() / ".ferrymq" / "offsets"
    changed = BrokerConfig().replace(store_dir="elsewhere", listen_port=1)
    assert changed.store_dir == Path("elsewhere") and changed.listen_port == 1
    assert dataclasses.replace(ConsumerOptions(), offset_store_dir="o").offset_store_dir == Path("o")
    assert pickle.loads(pickle.dumps(changed)) == changed


def test_load_config_takes_text_paths(tmp_path: Path) -> None:
    conf = tmp_path / "broker.toml"
    conf.write_text('store_dir = "from-file"\n', encoding="utf-8")
    cfg = load_config(str(conf), store_dir=str(tmp_path / "given"))
    assert cfg.store_dir == tmp_path / "given"
    assert load_config(str(conf)).store_dir == Path("from-file")


async def test_a_broker_and_name_server_run_on_text_paths(tmp_path: Path) -> None:
    namesrv = NameServer(NamesrvConfig(port=0, enable_controller=True, controller_dir=str(tmp_path / "ctl")))
    await namesrv.start()
    broker = Broker(BrokerConfig(store_dir=str(tmp_path / "store"), listen_port=0,
                                 namesrv_addr=namesrv.address, grpc_listen_port=-1))
    try:
        await broker.start()
        assert (tmp_path / "store" / "config").is_dir()
    finally:
        await broker.stop()
        await namesrv.stop()


def test_start_cluster_takes_a_text_directory(tmp_path: Path) -> None:
    with start_cluster(str(tmp_path / "cluster"), slaves=0, role="ASYNC_MASTER") as cluster:
        assert cluster.base_dir == tmp_path / "cluster"
        assert (tmp_path / "cluster" / "logs" / "namesrv.log").exists()
