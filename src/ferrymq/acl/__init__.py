"""Access control compatible with RocketMQ's ACL 1.0 (plain_acl.yml, AclClientRPCHook signatures).

`signing` is what clients use; `rules`, `resources` and `check` are the server side; `AclFile`
keeps the rules of a file current; `AclGuard` is the hook a remoting server calls before it
dispatches a request."""

from .address import AddressPattern, parse_address_pattern
from .check import Denial, check_request
from .guard import AclGuard, GuardScope
from .permission import Perm, check_permission, parse_perm
from .rules import Account, AclConfigError, AclRules, load_rules, parse_rules
from .signing import ACCESS_KEY, SECURITY_TOKEN, SIGNATURE, Credentials, calc_signature, content_to_sign, sign
from .watch import AclFile

__all__ = [
    "ACCESS_KEY",
    "SECURITY_TOKEN",
    "SIGNATURE",
    "Account",
    "AclConfigError",
    "AclFile",
    "AclGuard",
    "AclRules",
    "AddressPattern",
    "Credentials",
    "Denial",
    "GuardScope",
    "Perm",
    "calc_signature",
    "check_permission",
    "check_request",
    "content_to_sign",
    "load_rules",
    "parse_address_pattern",
    "parse_perm",
    "parse_rules",
    "sign",
]
