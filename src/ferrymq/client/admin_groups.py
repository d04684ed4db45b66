"""The admin client's subscription group table (mqadmin's updateSubGroup, deleteSubGroup and
the broker's GET_ALL_SUBSCRIPTIONGROUP_CONFIG): per-group settings on each master broker.
AsyncAdminClient inherits them."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..common import jsonx
from ..common.codes import RequestCode
from ..common.errors import FerryMQError
from ..common.group_fields import GROUP_FIELDS, JSON_NAMES, field_value
from ..common.headers import fields
from .api import MQClientAPI


@dataclass(frozen=True, slots=True)
class GroupSettings:
    """One group's entry on one broker; `settings` by ferrymq's names (retry_max_times...),
    `raw` the broker's JSON (RocketMQ's SubscriptionGroupConfig)."""

    group: str
    broker: str
    settings: dict[str, bool | int]
    raw: dict[str, Any]

    @classmethod
    def from_json(cls, broker: str, data: dict[str, Any]) -> GroupSettings:
        settings = {ours: field_value(data[theirs], kind) for ours, theirs, kind in GROUP_FIELDS
                    if data.get(theirs) is not None}
        return cls(str(data.get("groupName", "")), broker, settings, data)

    def to_json(self) -> dict[str, Any]:
        return {"group": self.group, "broker": self.broker, **self.settings}


class UnknownGroupSettingError(FerryMQError, ValueError):
    def __init__(self, names: list[str]) -> None:
        super().__init__(f"unknown subscription group setting(s): {', '.join(names)} "
                         f"(known: {', '.join(JSON_NAMES)})")
        self.names = names


class GroupsAdmin:
    if TYPE_CHECKING:
        @property
        def api(self) -> MQClientAPI: ...

        async def brokers(self) -> dict[str, str]: ...

        async def _broker_address(self, broker: str) -> str: ...

    async def _masters(self, broker: str | None) -> dict[str, str]:
        """broker name -> master address: the one named (a name or HOST:PORT), or every master."""
        if broker is None:
            return await self.brokers()
        addr = await self._broker_address(broker)
        names = {a: n for n, a in (await self.brokers()).items()}
        return {names.get(addr, broker): addr}

    async def masterless_brokers(self) -> list[str]:
        """The broker groups registered with no master now (it is down; a slave still
        registers): a change sent to every master does not reach them."""
        info = await self.api.cluster_info()
        return sorted(str(name) for name, bd in (info.get("brokerAddrTable") or {}).items()
                      if "0" not in {str(k) for k in (bd.get("brokerAddrs") or {})})

    async def _table(self, addr: str) -> dict[str, Any]:
        resp = await self.api.invoke_ok(addr, RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG)
        table: dict[str, Any] = jsonx.loads(resp.body or b"{}").get("subscriptionGroupTable") or {}
        return table

    async def subscription_groups(self, broker: str | None = None) -> list[GroupSettings]:
        """Every group entry of every master (or of `broker`), by group then broker."""
        masters = await self._masters(broker)
        tables = await asyncio.gather(*(self._table(a) for a in masters.values()))
        rows = [GroupSettings.from_json(name, {"groupName": g, **entry})
                for name, table in zip(masters, tables, strict=True) for g, entry in table.items()]
        return sorted(rows, key=lambda r: (r.group, r.broker))

    async def update_subscription_group(self, group: str, changes: dict[str, bool | int],
                                        broker: str | None = None) -> list[GroupSettings]:
        """Change some of the group's settings (ferrymq's names: retry_max_times=3...) on every
        master, or on `broker`, creating it where it does not exist. The broker replaces an
        entry whole, so each one is read first and sent back with the changes: settings not
        named keep their values (mqadmin updateSubGroup resets them to the defaults)."""
        unknown = sorted(set(changes) - set(JSON_NAMES))
        if unknown:
            raise UnknownGroupSettingError(unknown)
        masters = await self._masters(broker)

        async def one(name: str, addr: str) -> GroupSettings:
            entry = dict((await self._table(addr)).get(group) or {})
            entry["groupName"] = group
            entry.update({JSON_NAMES[k]: v for k, v in changes.items()})
            await self.api.invoke_ok(addr, RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
                                     body=jsonx.dumps_bytes(entry))
            return GroupSettings.from_json(name, (await self._table(addr)).get(group) or entry)

        return list(await asyncio.gather(*(one(n, a) for n, a in masters.items())))

    async def delete_subscription_group(self, group: str, broker: str | None = None) -> list[str]:
        """Remove the group's entry from every master (or `broker`); returns the broker names.
        Its offsets stay (a group created again resumes where it was)."""
        masters = await self._masters(broker)
        await asyncio.gather(*(self.api.invoke_ok(a, RequestCode.DELETE_SUBSCRIPTIONGROUP,
                                                  fields(groupName=group))
                               for a in masters.values()))
        return list(masters)
