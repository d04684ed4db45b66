"""Subscription groups (config/subscriptionGroup.json, RocketMQ's SubscriptionGroupManager
format): per-group settings a consumer group is served by.

A group is created on its first heartbeat, pull or pop when auto_create_subscription_group is
on (RocketMQ's findSubscriptionGroupConfig), or explicitly (UPDATE_AND_CREATE_SUBSCRIPTIONGROUP).
Changes are journaled as the topic table's are (topic_journal.JournaledTable, in
config/subscriptionGroup.journal): a group created by a heartbeat costs one appended line, not
a rewrite of every group; the snapshot is rewritten once the journal holds as many lines as
half the groups (at least 1,000) and at a clean stop."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ..common.codes import ResponseCode
from ..common.errors import FerryMQError
from ..common.group_fields import GROUP_FIELDS, field_value
from ..common.names import TOOLS_CONSUMER_GROUP, validate_group
from ..store import read_json_file
from .coalesce import Coalescer
from .topic_journal import JournaledTable

SNAPSHOT_NAME = "subscriptionGroup.json"
JOURNAL_NAME = "subscriptionGroup.journal"
# RocketMQ's MixAll.isSysConsumerGroup: such groups exist whatever auto-creation says.
SYS_GROUP_PREFIX = "CID_RMQ_SYS_"
# Groups every broker has from the start, as RocketMQ's SubscriptionGroupManager.init: the
# tools (admin, dashboard, Spark) pull with TOOLS_CONSUMER.
_BUILT_IN = (TOOLS_CONSUMER_GROUP,)
# Disabled or deleted, every tool's read would be refused (msg get, dlq, the dashboard, Spark).
_TOOLS_NEED_IT = ("cannot be turned off or deleted: ferrymq's tools (msg get, dlq, the dashboard, Spark) "
                  "read with this group")

class GroupConfigError(FerryMQError, ValueError):
    """A subscription group setting out of range."""

    def __init__(self, group: str, key: str, reason: str) -> None:
        super().__init__(f"subscription group {group}: {key} {reason}")
        self.group = group
        self.key = key
        self.reason = reason


class GroupRefused(FerryMQError):
    """A consumer request refused by its group's entry: RocketMQ's response code and remark."""

    def __init__(self, group: str, code: ResponseCode, remark: str) -> None:
        super().__init__(remark)
        self.group = group
        self.code = code


@dataclass(frozen=True, slots=True)
class SubscriptionGroupConfig:
    group_name: str
    consume_enable: bool = True
    consume_from_min_enable: bool = True
    consume_broadcast_enable: bool = True
    consume_message_orderly: bool = False
    retry_queue_nums: int = 1
    retry_max_times: int = 16
    broker_id: int = 0
    which_broker_when_consume_slowly: int = 1
    notify_consumer_ids_changed_enable: bool = True
    group_sys_flag: int = 0
    consume_timeout_minute: int = 15
    # What RocketMQ's tools send that ferrymq does not act on (groupRetryPolicy, attributes,
    # subscriptionDataSet...): kept and given back, so a round trip through ferrymq loses nothing.
    extra: Mapping[str, Any] = field(default_factory=dict)

    def validate(self) -> SubscriptionGroupConfig:
        validate_group(self.group_name)
        if self.retry_max_times < 0:
            raise GroupConfigError(self.group_name, "retryMaxTimes", "must be >= 0")
        if not 1 <= self.retry_queue_nums <= 1024:
            raise GroupConfigError(self.group_name, "retryQueueNums", "must be between 1 and 1024")
        if self.broker_id < 0 or self.which_broker_when_consume_slowly < 0:
            raise GroupConfigError(self.group_name, "brokerId/whichBrokerWhenConsumeSlowly", "must be >= 0")
        if self.group_name in _BUILT_IN and not self.consume_enable:
            raise GroupConfigError(self.group_name, "consumeEnable", _TOOLS_NEED_IT)
        return self

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = dict(self.extra)
        out["groupName"] = self.group_name
        for ours, theirs, _ in GROUP_FIELDS:
            out[theirs] = getattr(self, ours)
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> SubscriptionGroupConfig:
        known = {theirs for _, theirs, _ in GROUP_FIELDS} | {"groupName"}
        values: dict[str, Any] = {ours: field_value(data[theirs], kind) for ours, theirs, kind in GROUP_FIELDS
                  if data.get(theirs) is not None}
        return cls(group_name=str(data.get("groupName") or ""),
                   extra={k: v for k, v in data.items() if k not in known}, **values)


class GroupManager(JournaledTable):
    """The table. `settings` gives (auto_create_subscription_group, the broker's
    max_reconsume_times: the retry count of the groups it creates); `writable` says whether
    this broker may add to its table now (a slave serves a group its master has not copied
    to it yet from defaults, without storing it: the copy would remove it again)."""

    def __init__(self, config_dir: Path, *, settings: Callable[[], tuple[bool, int]],
                 writable: Callable[[], bool], on_change: Callable[[], None] | None = None) -> None:
        super().__init__(config_dir / SNAPSHOT_NAME, config_dir / JOURNAL_NAME)
        self._settings = settings
        self._writable = writable
        self.on_change = on_change
        self.groups: dict[str, SubscriptionGroupConfig] = {}
        self._durable = 0
        # Set once the broker runs a loop: changes are journaled by a coalesced worker-thread
        # append; before (start-up, tools) each change writes the snapshot at once.
        self._writer: Coalescer | None = None

    # --- persistence -------------------------------------------------------------------------
    def load(self) -> None:
        data = read_json_file(self._path, None)
        if isinstance(data, dict):
            for name, cfg in (data.get("subscriptionGroupTable") or {}).items():
                self.groups[str(name)] = SubscriptionGroupConfig.from_json({"groupName": name, **cfg})
            self._load_version(data)
        self._replay(self._apply)
        for name in _BUILT_IN:
            self.groups.setdefault(name, SubscriptionGroupConfig(name))
        self._durable = self.version

    def _apply(self, name: str, config: dict[str, Any] | None) -> None:
        if config is None:
            self.groups.pop(name, None)
        else:
            self.groups[name] = SubscriptionGroupConfig.from_json(config)

    def start_writer(self) -> None:
        self._writer = Coalescer(self._write_pending, "groups-persist", min_interval=0.05, pace=1.0)

    def wrapper_json(self) -> dict[str, Any]:
        """RocketMQ's SubscriptionGroupWrapper (GET_ALL_SUBSCRIPTIONGROUP_CONFIG, the file)."""
        with self._lock:
            return {
                "dataVersion": dict(self.data_version),
                "forbiddenTable": {},
                "subscriptionGroupTable": {n: g.to_json() for n, g in sorted(self.groups.items())},
            }

    def write(self, snapshot: dict[str, Any]) -> None:
        super().write(snapshot)
        self._durable = max(self._durable, int(snapshot["dataVersion"]["counter"]))

    async def _write_pending(self) -> None:
        records, version = self.take_pending()
        if records:
            await asyncio.to_thread(self.append_journal, records)
        self._durable = max(self._durable, version)
        if self.snapshot_due(len(self.groups)):
            await asyncio.to_thread(self.write, self.wrapper_json())

    async def durable(self) -> None:
        """Return once every change made so far is on disk."""
        if self._writer is not None and self._durable < self.version:
            await self._writer.ask()

    async def writer_idle(self) -> None:
        """Stop journaling, once a run in progress has ended: at a stop, persist() writes the
        snapshot next (and removes the journal), so the file is RocketMQ's whole table."""
        writer, self._writer = self._writer, None
        if writer is not None:
            await writer.idle()

    def _changed(self, *names: str) -> None:
        version, stamp = self._bump()
        if self._writer is None:
            self.persist()
        else:
            for name in names:
                cfg = self.groups.get(name)
                self.stage(version, stamp, name, None if cfg is None else cfg.to_json())
            try:
                self._writer.ask_nowait()
            except RuntimeError:  # no running loop (tools): written here
                self.persist()
        if self.on_change is not None:
            self.on_change()

    # --- the table ---------------------------------------------------------------------------
    def get(self, group: str) -> SubscriptionGroupConfig | None:
        return self.groups.get(group)

    def upsert(self, cfg: SubscriptionGroupConfig) -> SubscriptionGroupConfig:
        cfg.validate()
        with self._lock:
            if self.groups.get(cfg.group_name) != cfg:
                self.groups[cfg.group_name] = cfg
                self._changed(cfg.group_name)
        return cfg

    def delete(self, group: str) -> bool:
        if group in _BUILT_IN:
            raise GroupConfigError(group, "group", _TOOLS_NEED_IT)
        with self._lock:
            if self.groups.pop(group, None) is None:
                return False
            self._changed(group)
            return True

    def adopt(self, table: Mapping[str, Any]) -> int:
        """Make this table the master's (a slave's copy); returns how many groups changed."""
        wanted = {str(n): SubscriptionGroupConfig.from_json({"groupName": n, **g}) for n, g in table.items()}
        with self._lock:
            changed = [n for n in self.groups if n not in wanted]
            for name in changed:
                del self.groups[name]
            for name, cfg in wanted.items():
                if self.groups.get(name) != cfg:
                    self.groups[name] = cfg
                    changed.append(name)
            if changed:
                self._changed(*changed)
        return len(changed)

    def find(self, group: str) -> SubscriptionGroupConfig | None:
        """RocketMQ's findSubscriptionGroupConfig: the group's entry, created from the defaults
        when auto-creation is on (or it is a system group); None when it does not exist. A
        known group costs one dict lookup: a heartbeat of an existing group writes nothing."""
        cfg = self.groups.get(group)
        if cfg is not None:
            return cfg
        auto_create, retry_max_times = self._settings()
        if not auto_create and not group.startswith(SYS_GROUP_PREFIX):
            return None
        cfg = SubscriptionGroupConfig(group, retry_max_times=retry_max_times)
        if not self._writable():
            return cfg
        validate_group(group)
        with self._lock:
            existing = self.groups.get(group)
            if existing is not None:
                return existing
            self.groups[group] = cfg
            self._changed(group)
        return cfg

    def existing(self, group: str) -> SubscriptionGroupConfig:
        """The group's entry (found or created); GroupRefused with RocketMQ's
        SUBSCRIPTION_GROUP_NOT_EXIST when there is none."""
        cfg = self.find(group)
        if cfg is None:
            raise GroupRefused(group, ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
                               f"subscription group [{group}] does not exist: create it (ferrymq group "
                               "update) or turn auto_create_subscription_group on")
        return cfg

    def consumable(self, group: str) -> SubscriptionGroupConfig:
        """The entry of a group that may consume: refused as RocketMQ's pull and pop processors
        refuse (SUBSCRIPTION_GROUP_NOT_EXIST; NO_PERMISSION when consume_enable is off)."""
        cfg = self.existing(group)
        if not cfg.consume_enable:
            raise GroupRefused(group, ResponseCode.NO_PERMISSION, f"subscription group no permission, {group}")
        return cfg


def updated(cfg: SubscriptionGroupConfig, **changes: Any) -> SubscriptionGroupConfig:
    """`cfg` with the given settings changed (None: unchanged), validated."""
    return replace(cfg, **{k: v for k, v in changes.items() if v is not None}).validate()
