"""plain_acl.yml, RocketMQ's ACL 1.0 file: accounts and the global white list.

    globalWhiteRemoteAddresses: [10.10.103.*]
    accounts:
      - accessKey: RocketMQ
        secretKey: 12345678
        whiteRemoteAddress:
        admin: false
        defaultTopicPerm: DENY
        defaultGroupPerm: SUB
        topicPerms: [topicA=DENY, topicB=PUB|SUB]
        groupPerms: [groupA=DENY, groupB=SUB]

Group permissions are kept under the group's retry topic (%RETRY%group), as RocketMQ keeps
them, so one lookup serves both kinds of resource."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from ..common.errors import FerryMQError
from ..common.names import retry_topic
from .address import AddressPattern, AddressPatternError, parse_address_pattern
from .permission import Perm, parse_perm

# RocketMQ refuses keys of this length or less.
MIN_KEY_LENGTH = 6


class AclConfigError(FerryMQError, ValueError):
    def __init__(self, source: str, reason: str) -> None:
        super().__init__(f"ACL file {source}: {reason}")
        self.source = source
        self.reason = reason


@dataclass(frozen=True, slots=True)
class Account:
    access_key: str
    secret_key: str = field(repr=False)
    white_remote_address: AddressPattern = field(default_factory=lambda: parse_address_pattern(None))
    admin: bool = False
    default_topic_perm: int = Perm.DENY
    default_group_perm: int = Perm.DENY
    # Topic names and groups' retry topics -> permission; None when the file gives neither list.
    resource_perms: Mapping[str, int] | None = None


@dataclass(frozen=True, slots=True)
class AclRules:
    accounts: Mapping[str, Account] = field(default_factory=lambda: MappingProxyType({}))
    global_white: tuple[AddressPattern, ...] = ()

    def first_admin(self) -> Account | None:
        return next((a for a in self.accounts.values() if a.admin), None)


def load_rules(path: Path) -> AclRules:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise AclConfigError(str(path), exc.strerror or str(exc)) from None
    return parse_rules(text, str(path))


def parse_rules(text: str, source: str = "<text>") -> AclRules:
    # Imported here: a broker without ACL does not need PyYAML.
    import yaml

    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise AclConfigError(source, f"not YAML: {exc}") from None
    if data is None:
        return AclRules()
    if not isinstance(data, dict):
        raise AclConfigError(source, "the top level must be a mapping (globalWhiteRemoteAddresses, accounts)")
    try:
        white = tuple(parse_address_pattern(_text(a)) for a in _list(data, "globalWhiteRemoteAddresses"))
        accounts: dict[str, Account] = {}
        for i, raw in enumerate(_list(data, "accounts")):
            if not isinstance(raw, dict):
                raise AclConfigError(source, f"accounts[{i}] is not a mapping")
            account = _account(raw, f"accounts[{i}]")
            if account.access_key in accounts:
                raise AclConfigError(source, f"accessKey {account.access_key!r} is given twice")
            accounts[account.access_key] = account
    except AddressPatternError as exc:
        raise AclConfigError(source, str(exc)) from None
    except ValueError as exc:
        if isinstance(exc, AclConfigError):
            raise
        raise AclConfigError(source, str(exc)) from None
    return AclRules(MappingProxyType(accounts), white)


def _text(value: Any) -> str | None:
    # YAML reads `secretKey: 12345678` as a number; RocketMQ's loader takes it as text.
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _list(data: dict[str, Any], key: str) -> list[Any]:
    value = data.get(key)
    if value is None:
        return []
    if not isinstance(value, list):
        raise ValueError(f"{key} must be a list")
    return value


def _perm(value: Any, where: str) -> Perm:
    perm = parse_perm(_text(value))
    if perm is None:
        raise ValueError(f"{where}: {value!r} is not DENY, PUB, SUB, PUB|SUB or SUB|PUB")
    return perm


def _account(raw: dict[str, Any], where: str) -> Account:
    access_key = _text(raw.get("accessKey")) or ""
    secret_key = _text(raw.get("secretKey")) or ""
    if len(access_key) <= MIN_KEY_LENGTH or len(secret_key) <= MIN_KEY_LENGTH:
        raise ValueError(f"{where}: accessKey and secretKey must be longer than {MIN_KEY_LENGTH} characters")
    admin = raw.get("admin", False)
    if isinstance(admin, str):
        admin = admin.strip().lower() == "true"
    perms: dict[str, int] | None = None
    for key, is_topic in (("groupPerms", False), ("topicPerms", True)):
        items = raw.get(key)
        if not items:
            continue
        if not isinstance(items, list):
            raise ValueError(f"{where}.{key} must be a list of name=PERM")
        perms = perms if perms is not None else {}
        for item in items:
            name, eq, perm_text = (_text(item) or "").partition("=")
            if not eq or not name.strip() or "=" in perm_text:
                raise ValueError(f"{where}.{key}: {item!r} is not name=PERM (for example topicA=SUB)")
            name = name.strip()
            perms[name if is_topic else retry_topic(name)] = _perm(perm_text, f"{where}.{key} {name}")
    return Account(
        access_key=access_key,
        secret_key=secret_key,
        white_remote_address=parse_address_pattern(_text(raw.get("whiteRemoteAddress"))),
        admin=bool(admin),
        default_topic_perm=_perm(raw.get("defaultTopicPerm"), f"{where}.defaultTopicPerm"),
        default_group_perm=_perm(raw.get("defaultGroupPerm"), f"{where}.defaultGroupPerm"),
        resource_perms=MappingProxyType(perms) if perms is not None else None,
    )
