"""The broker's configuration over the wire (RocketMQ's GET_BROKER_CONFIG / UPDATE_BROKER_CONFIG):
every key as `camelCase=value` text, and the keys that may change while the broker runs.

Only keys the broker reads on every request can change at runtime; a key read once at start
(ports, store layout, intervals of running loops) is refused rather than accepted and then
ignored. A broker started with a configuration file (`--config`) writes the change back to it
(config_file.py), so a restart keeps it."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from .config import _CAMEL_ALIASES, BrokerConfig, ConfigError

# RocketMQ's broker.conf names where they are not the plain camelCase of ferrymq's field.
ROCKETMQ_NAMES = {
    "store_dir": "storePathRootDir",
    "host": "brokerIP1",
    "mapped_file_size_commitlog": "mappedFileSizeCommitLog",
}
_FIELDS = {f.name: f for f in dataclasses.fields(BrokerConfig)}

# Read from the broker's current configuration on each request (send, pull, heartbeat, pop,
# transaction check), so a change takes effect at once: RocketMQ's runtime-updatable keys
# that ferrymq has.
RUNTIME_KEYS = frozenset({
    "auto_create_topic_enable", "auto_create_subscription_group", "max_reconsume_times",
    "long_polling_enable", "access_message_in_memory_max_ratio", "slave_read_enable",
    "reject_transaction_message", "transaction_timeout_ms", "transaction_check_max",
    "enable_property_filter", "pop_max_inflight_per_queue",
})


def camel(name: str) -> str:
    if name in ROCKETMQ_NAMES:
        return ROCKETMQ_NAMES[name]
    head, *rest = name.split("_")
    return head + "".join(w[:1].upper() + w[1:] for w in rest)


_BY_WIRE_NAME = {camel(n): n for n in _FIELDS}


def field_name(key: str) -> str | None:
    """The field a key names: camelCase as RocketMQ's tools send it, or snake_case."""
    if key in _FIELDS:
        return key
    if key in _BY_WIRE_NAME:
        return _BY_WIRE_NAME[key]
    if key in _CAMEL_ALIASES:  # broker.conf's spelling where it differs (transactionTimeOut)
        return _CAMEL_ALIASES[key]
    snake = re.sub(r"(?<!^)(?=[A-Z])", "_", key).lower()
    return snake if snake in _FIELDS else None


def _text(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def config_properties(cfg: BrokerConfig) -> dict[str, str]:
    """Every key, camelCase, as text (MixAll.properties2String's input)."""
    values = {camel(n): _text(getattr(cfg, n)) for n in sorted(_FIELDS)}
    # Unset means the default rule (docs/grpc.md): show the port that rule gives.
    values[camel("grpc_listen_port")] = str(cfg.grpc_port)
    # Any signed account may read the configuration; the broker's own secret is not for it.
    if cfg.secret_key:
        values[camel("secret_key")] = "******"
    return values


def _parse(name: str, text: str) -> object:
    kind = _FIELDS[name].type  # a string: the module uses postponed annotations
    text = text.strip()
    try:
        if kind == "bool":
            if text.lower() not in ("true", "false"):
                raise ValueError("expected true or false")
            return text.lower() == "true"
        if kind == "int":
            return int(text)
        if kind == "float":
            return float(text)
        if kind == "Path":
            return Path(text)
    except ValueError as exc:
        raise ConfigError(camel(name), f"{text!r} is not a valid {kind}: {exc}") from None
    return text


def apply_runtime_update(cfg: BrokerConfig, values: Mapping[str, str]) -> BrokerConfig:
    """`cfg` with `values` applied, all or nothing; ConfigError names the first key refused."""
    changes: dict[str, Any] = {}
    for key, text in values.items():
        name = field_name(key)
        if name is None:
            raise ConfigError(key, "unknown key")
        if name not in RUNTIME_KEYS:
            allowed = ", ".join(sorted(camel(n) for n in RUNTIME_KEYS))
            raise ConfigError(
                key,
                "cannot change while the broker runs (set it in the configuration file and "
                f"restart); keys that can: {allowed}",
            )
        changes[name] = _parse(name, text)
    return dataclasses.replace(cfg, **changes).validate()


def read_config(values: Mapping[str, str], names: Iterable[str]) -> dict[str, object]:
    """The named fields of a GET_BROKER_CONFIG answer (`camelCase=value` text), parsed; one the
    answer lacks or cannot be read is left out, so the reader's default stands."""
    out: dict[str, object] = {}
    for name in names:
        text = values.get(camel(name))
        if text is None:
            continue
        try:
            out[name] = _parse(name, text)
        except ConfigError:
            continue
    return out
