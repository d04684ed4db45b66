"""What `ferrymq proxy` learns from the brokers behind it: each master's configuration (the
message size limit, the longest timer delay, the delay levels, the retry count) through
GET_BROKER_CONFIG and its subscription group table through GET_ALL_SUBSCRIPTIONGROUP_CONFIG,
as RocketMQ's proxy in cluster mode reads them from the brokers. Asked again once the route
time-to-live has passed; a master that does not answer keeps what it said last.

The gRPC front checks a request against one set of limits whichever broker group serves it, so
several masters are combined into the strictest: the smallest size and delay limits, the
smallest default retry count, transactions refused when one master refuses them; the delay
levels are the first master's (by broker name)."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Mapping
from typing import Any

from ..broker.config import BrokerConfig
from ..broker.runtime_config import read_config
from ..client.instance import ClientInstance
from ..common import jsonx
from ..common.codes import RequestCode
from ..common.delay import parse_delay_levels
from ..common.errors import FerryMQError
from ..grpc.backend import Limits
from ..grpc.settings import ServerSettings
from ..remoting import RemotingError

log = logging.getLogger("ferrymq.proxy")

# The BrokerConfig fields the proxy's checks and its clients' settings use.
_FIELDS = ("max_message_size", "timer_max_delay_sec", "message_delay_level", "max_reconsume_times",
           "reject_transaction_message", "enable_property_filter", "long_polling_enable",
           "enable_topic_message_type_check")
_DEFAULT = BrokerConfig()


def combine(configs: Mapping[str, BrokerConfig]) -> BrokerConfig:
    """The strictest of several masters' settings (module doc); the defaults when none."""
    if not configs:
        return _DEFAULT
    values = [configs[n] for n in sorted(configs)]
    return dataclasses.replace(
        values[0],
        max_message_size=min(c.max_message_size for c in values),
        timer_max_delay_sec=min(c.timer_max_delay_sec for c in values),
        max_reconsume_times=min(c.max_reconsume_times for c in values),
        reject_transaction_message=any(c.reject_transaction_message for c in values),
        enable_property_filter=all(c.enable_property_filter for c in values),
        long_polling_enable=all(c.long_polling_enable for c in values),
        enable_topic_message_type_check=any(c.enable_topic_message_type_check for c in values))


def limits_of(cfg: BrokerConfig) -> Limits:
    # No cluster name: the groups behind a proxy may be in several clusters.
    return Limits(max_message_size=cfg.max_message_size, timer_max_delay_sec=cfg.timer_max_delay_sec,
                  reject_transaction_message=cfg.reject_transaction_message,
                  enable_property_filter=cfg.enable_property_filter, long_polling_enable=cfg.long_polling_enable,
                  cluster_name="", check_message_type=cfg.enable_topic_message_type_check)


def settings_of(cfg: BrokerConfig) -> ServerSettings:
    levels = list(parse_delay_levels(cfg.message_delay_level))
    # As the broker's own endpoint: a 4.x consumer's first retry is delay level 3.
    return ServerSettings(max_body_size=cfg.max_message_size, max_reconsume_times=cfg.max_reconsume_times,
                          retry_delays_ms=levels[2:] or levels,
                          validate_message_type=cfg.enable_topic_message_type_check)


class BrokerSettings:
    """The masters' configurations and group tables, by broker name, and their combination."""

    def __init__(self, instance: ClientInstance, ttl_s: float) -> None:
        self._inst = instance
        self._ttl_s = ttl_s
        self._configs: dict[str, BrokerConfig] = {}
        self._groups: dict[str, dict[str, Any]] = {}
        self._learned_at = float("-inf")
        self._learning: asyncio.Task[None] | None = None
        self.combined = _DEFAULT
        self.limits = limits_of(_DEFAULT)
        self.settings = settings_of(_DEFAULT)

    def stale(self) -> bool:
        return time.monotonic() - self._learned_at >= self._ttl_s

    async def learn(self) -> None:
        """Ask the name server for every group's master and each master for its settings; one
        call at a time (concurrent callers wait for the same one)."""
        if self._learning is None or self._learning.done():
            self._learning = asyncio.get_running_loop().create_task(self._learn())
        await asyncio.shield(self._learning)

    def refresh(self) -> None:
        """learn() in the background when the last is older than the time-to-live."""
        if self.stale() and (self._learning is None or self._learning.done()):
            self._learning = asyncio.get_running_loop().create_task(self._learn())

    async def _learn(self) -> None:
        self._learned_at = time.monotonic()
        api = self._inst.api
        try:
            info = await api.cluster_info()
        except (RemotingError, FerryMQError) as exc:
            log.warning("cannot read the cluster from the name server: %s", exc)
            return
        masters = {}
        for name, data in (info.get("brokerAddrTable") or {}).items():
            addrs = {str(k): str(v) for k, v in (data.get("brokerAddrs") or {}).items()}
            if "0" in addrs:
                masters[str(name)] = addrs["0"]
        names = sorted(masters)
        configs = await asyncio.gather(*(api.broker_config(masters[n]) for n in names), return_exceptions=True)
        tables = await asyncio.gather(*(api.invoke_ok(masters[n], RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG)
                                        for n in names), return_exceptions=True)
        for name, cfg, table in zip(names, configs, tables, strict=True):
            if isinstance(cfg, dict):
                self._configs[name] = dataclasses.replace(_DEFAULT, **read_config(cfg, _FIELDS))  # type: ignore[arg-type]
            else:
                log.info("broker group %s did not give its configuration: %s", name, cfg)
            if not isinstance(table, BaseException):
                self._groups[name] = jsonx.loads(table.body or b"{}").get("subscriptionGroupTable") or {}
        self.combined = combine(self._configs)
        self.limits = limits_of(self.combined)
        self.settings = settings_of(self.combined)

    async def retry_max_times(self, group: str) -> int | None:
        """The group's retryMaxTimes on the masters (the largest where they differ, so no
        group's messages end before that master allows); None where no master has the group.
        A group none had is asked about again, as it may just have been created (a client's
        settings are asked for when it starts, not per message)."""
        found = self._retry_max_times(group)
        if found is None:
            await self.learn()
            found = self._retry_max_times(group)
        else:
            self.refresh()
        return found

    def _retry_max_times(self, group: str) -> int | None:
        counts = [int(t[group]["retryMaxTimes"]) for t in self._groups.values()
                  if isinstance(t.get(group), dict) and t[group].get("retryMaxTimes") is not None]
        return max(counts) if counts else None
