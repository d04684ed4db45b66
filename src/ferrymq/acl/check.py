"""The decision for one request, in RocketMQ's order (PlainPermissionManager.validate): a
globally white-listed address passes; otherwise the request must name an account (AccessKey);
the account's own white-listed address passes; otherwise the signature must verify, and then
the account must be an admin for admin requests and hold the permission each resource needs
(its own for the resource, else its default for topics or groups)."""

from __future__ import annotations

import hmac
from collections.abc import Callable
from dataclasses import dataclass

from ..common.names import is_retry_topic
from ..remoting.command import RemotingCommand
from .actions import ADMIN_HINT, CREDENTIALS_HINT, describe_request
from .permission import Perm, check_permission, perm_text
from .resources import Needs, ResourceParseError, needs_of
from .rules import Account, AclRules
from .signing import ACCESS_KEY, SIGNATURE, UNIQUE_MSG_QUERY_FLAG, signature_of

TRACE_TOPIC = "RMQ_SYS_TRACE_TOPIC"


@dataclass(frozen=True, slots=True)
class Denial:
    reason: str
    access_key: str | None = None
    resource: str | None = None
    needed: str | None = None

    @property
    def remark(self) -> str:
        return f"ACL: {self.reason}"


def _describe(resource: str) -> str:
    if is_retry_topic(resource):
        return f"group {resource[len('%RETRY%'):]}"
    return f"topic {resource}"


def signature_ok(account: Account, cmd: RemotingCommand) -> bool:
    given = cmd.ext_fields.get(SIGNATURE)
    if not given:
        return False
    if hmac.compare_digest(signature_of(cmd.ext_fields, cmd.body, account.secret_key), given):
        return True
    if UNIQUE_MSG_QUERY_FLAG in cmd.ext_fields:
        # Older clients signed a unique-key query before adding this field.
        expected = signature_of(cmd.ext_fields, cmd.body, account.secret_key, (SIGNATURE, UNIQUE_MSG_QUERY_FLAG))
        return hmac.compare_digest(expected, given)
    return False


def check_request(rules: AclRules, cmd: RemotingCommand, remote_ip: str) -> Denial | None:
    return decide(rules, remote_ip, cmd.ext_fields.get(ACCESS_KEY), describe_request(cmd),
                  lambda account: signature_ok(account, cmd), lambda: needs_of(cmd))


def decide(rules: AclRules, remote_ip: str, access_key: str | None, what: str,
           verify: Callable[[Account], bool], needs: Callable[[], Needs]) -> Denial | None:
    """The decision for any protocol: `verify` checks the request's signature with an account's
    secret, `needs` says what the request uses (only asked once the signature verified)."""
    if any(p.matches(remote_ip) for p in rules.global_white):
        return None
    if not access_key:
        return Denial(f"{what} from {remote_ip} carries no AccessKey (requests must be signed): {CREDENTIALS_HINT}")
    account = rules.accounts.get(access_key)
    if account is None:
        return Denial(f"{what}: no account {access_key!r}; {CREDENTIALS_HINT}", access_key)
    if account.white_remote_address.matches(remote_ip):
        return None
    if not verify(account):
        return Denial(f"signature check failed for accessKey={access_key} ({what}): check its secret key, "
                      "--secret-key or FERRYMQ_SECRET_KEY", access_key)
    try:
        needed = needs()
    except ResourceParseError as exc:
        return Denial(str(exc), access_key)
    if needed.resources.get(TRACE_TOPIC) == Perm.PUB:
        return None
    if needed.admin and not account.admin:
        return Denial(f"{what} needs an admin account; accessKey={access_key} is not one: {ADMIN_HINT}", access_key,
                      needed="admin")
    owned = account.resource_perms
    if owned is None and account.admin:
        return None
    for resource, perm_needed in needed.resources.items():
        perm = owned.get(resource) if owned is not None else None
        if perm is None:
            perm = account.default_group_perm if is_retry_topic(resource) else account.default_topic_perm
        if not check_permission(perm_needed, perm):
            return Denial(f"accessKey={access_key} has no {perm_text(perm_needed)} permission on "
                          f"{_describe(resource)} (it has {perm_text(perm)})", access_key, resource,
                          perm_text(perm_needed))
    return None
