"""java.util.Properties text, as RocketMQ's MixAll.properties2String writes it and
string2Properties reads it: the body of GET_BROKER_CONFIG and UPDATE_BROKER_CONFIG."""

from __future__ import annotations

from collections.abc import Mapping


def parse_properties(text: str) -> dict[str, str]:
    """java.util.Properties text as MixAll.properties2String writes it (no escapes needed for
    ferrymq's keys and values)."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line[0] in "#!":
            continue
        key, _, value = line.partition("=")
        out[key.strip()] = value.strip()
    return out


def format_properties(values: Mapping[str, str]) -> str:
    return "".join(f"{k}={v}\n" for k, v in values.items())
