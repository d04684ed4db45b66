"""The broker's configuration as GET_BROKER_CONFIG sends it, and which keys
UPDATE_BROKER_CONFIG may change while the broker runs."""

from __future__ import annotations

import pytest

from ferrymq.broker.config import BrokerConfig, ConfigError
from ferrymq.broker.runtime_config import (
    RUNTIME_KEYS,
    apply_runtime_update,
    camel,
    config_properties,
    field_name,
)


def test_properties_use_rocketmq_names_and_text_values() -> None:
    props = config_properties(BrokerConfig(broker_name="broker-x", max_reconsume_times=7))
    assert props["brokerName"] == "broker-x"
    assert props["maxReconsumeTimes"] == "7"
    assert props["autoCreateTopicEnable"] == "true"
    assert props["storePathRootDir"] == "ferrymq-data"
    assert props["brokerIP1"] == "127.0.0.1"
    assert props["flushDiskType"] == "ASYNC_FLUSH"
    assert "store_dir" not in props


def test_keys_resolve_from_camel_or_snake_case() -> None:
    assert field_name("maxReconsumeTimes") == "max_reconsume_times"
    assert field_name("max_reconsume_times") == "max_reconsume_times"
    assert field_name("brokerIP1") == "host"
    assert field_name("noSuchKey") is None
    assert camel("long_polling_enable") == "longPollingEnable"


def test_runtime_keys_change_with_typed_values() -> None:
    cfg = apply_runtime_update(
        BrokerConfig(),
        {"maxReconsumeTimes": "3", "auto_create_topic_enable": "FALSE", "longPollingEnable": "false"},
    )
    assert (cfg.max_reconsume_times, cfg.auto_create_topic_enable, cfg.long_polling_enable) == (
        3,
        False,
        False,
    )
    assert {"auto_create_topic_enable", "max_reconsume_times", "long_polling_enable",
            "access_message_in_memory_max_ratio"} < RUNTIME_KEYS
    # broker.conf's own spelling where it is not ferrymq's camelCase
    assert apply_runtime_update(BrokerConfig(), {"transactionTimeOut": "9000"}).transaction_timeout_ms == 9000


@pytest.mark.parametrize(
    ("values", "key", "reason"),
    [
        ({"listenPort": "1"}, "listenPort", "cannot change while the broker runs"),
        ({"flushDiskType": "SYNC_FLUSH"}, "flushDiskType", "cannot change while the broker runs"),
        ({"nope": "1"}, "nope", "unknown key"),
        ({"longPollingEnable": "maybe"}, "longPollingEnable", "not a valid bool"),
        ({"maxReconsumeTimes": "x"}, "maxReconsumeTimes", "not a valid int"),
        ({"maxReconsumeTimes": "-1"}, "max_reconsume_times", "must be >= 0"),
    ],
)
def test_refused_updates_name_the_key_and_change_nothing(
    values: dict[str, str], key: str, reason: str
) -> None:
    cfg = BrokerConfig()
    with pytest.raises(ConfigError) as info:
        apply_runtime_update(cfg, {"maxReconsumeTimes": "5", **values})
    assert info.value.key == key and reason in str(info.value)
    assert cfg.max_reconsume_times == 16
