from __future__ import annotations

from pathlib import Path

import pytest

from ferrymq.broker.config import BrokerConfig, ConfigError, load_config, parse_delay_levels


def test_delay_levels_parse_units() -> None:
    assert parse_delay_levels("1s 5s 10s 30s 1m 2h") == [1000, 5000, 10000, 30000, 60000, 7_200_000]
    assert parse_delay_levels("100ms 1.5s") == [100, 1500]


@pytest.mark.parametrize("bad", ["", "5x", "s", "1s abc"])
def test_bad_delay_levels_are_rejected(bad: str) -> None:
    with pytest.raises(ConfigError):
        parse_delay_levels(bad)


def test_toml_accepts_snake_case_and_broker_conf_names(tmp_path: Path) -> None:
    f = tmp_path / "broker.toml"
    f.write_text('flushDiskType = "SYNC_FLUSH"\nmax_reconsume_times = 3\nbrokerName = "b9"\n')
    cfg = load_config(f, listen_port=0)
    assert cfg.flush_disk_type == "SYNC_FLUSH"
    assert cfg.max_reconsume_times == 3
    assert cfg.broker_name == "b9"
    assert cfg.listen_port == 0


def test_unknown_key_is_an_error(tmp_path: Path) -> None:
    f = tmp_path / "broker.toml"
    f.write_text("no_such_key = 1\n")
    with pytest.raises(ConfigError) as err:
        load_config(f)
    assert err.value.key == "no_such_key"


def test_roles_and_ids_must_agree() -> None:
    with pytest.raises(ConfigError, match="slave's broker id"):
        BrokerConfig(broker_role="SLAVE").validate()
    with pytest.raises(ConfigError, match="master's broker id is 0"):
        BrokerConfig(broker_role="SYNC_MASTER", broker_id=2).validate()
    with pytest.raises(ConfigError, match="replica ids"):
        BrokerConfig(controller_addr="127.0.0.1:9876").validate()
    with pytest.raises(ConfigError, match="controller picks"):
        BrokerConfig(controller_addr="127.0.0.1:9876", broker_id=1, broker_role="SLAVE").validate()
    with pytest.raises(ConfigError, match="must be"):
        BrokerConfig(broker_role="MASTER").validate()
    assert BrokerConfig(broker_role="SLAVE", broker_id=1).validate().broker_role == "SLAVE"
    assert BrokerConfig(broker_role="SYNC_MASTER").validate().broker_id == 0
