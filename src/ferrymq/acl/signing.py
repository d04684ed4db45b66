"""Request signatures as RocketMQ's AclClientRPCHook makes them.

The signed content is the values of the request's extension fields (the custom header, the
AccessKey and any SecurityToken) in the order of their sorted names, Signature left out,
followed by the body; the signature is Base64(HmacSHA1(secret key, content)). ali-ons and the
C++ client add an OnsChannel field before signing; it is an ordinary field here."""

from __future__ import annotations

import base64
import functools
import hashlib
import hmac
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field

from ..remoting.command import RemotingCommand

ACCESS_KEY = "AccessKey"
SECRET_KEY = "SecretKey"
SIGNATURE = "Signature"
SECURITY_TOKEN = "SecurityToken"
# Clients of RocketMQ <= 4.9.3 added this field after signing a unique-key query.
UNIQUE_MSG_QUERY_FLAG = "_UNIQUE_KEY_QUERY"


@dataclass(frozen=True, slots=True)
class Credentials:
    access_key: str
    secret_key: str = field(repr=False)
    security_token: str | None = None

    def __post_init__(self) -> None:
        if not self.access_key or not self.secret_key:
            raise ValueError("credentials need both an access key and a secret key")


def credentials_from(access_key: str | None, secret_key: str | None) -> Credentials | None:
    """Credentials from optional options: none when neither is given, an error when one is."""
    if not access_key and not secret_key:
        return None
    if not access_key or not secret_key:
        raise ValueError("access_key and secret_key go together: give both or neither")
    return Credentials(access_key, secret_key)


def content_to_sign(ext_fields: Mapping[str, str], body: bytes | None,
                    skip: Collection[str] = (SIGNATURE,)) -> bytes:
    text = "".join(value for name, value in sorted(ext_fields.items()) if name not in skip)
    data = text.encode("utf-8")
    return data + body if body else data


def calc_signature(content: bytes, secret_key: str) -> str:
    digest = hmac.new(secret_key.encode("utf-8"), content, hashlib.sha1).digest()
    return base64.b64encode(digest).decode("ascii")


@functools.lru_cache(maxsize=256)
def _keyed(secret_key: str) -> hmac.HMAC:
    # The key schedule is the same for every request of an account: copy it instead.
    return hmac.new(secret_key.encode("utf-8"), digestmod=hashlib.sha1)


def signature_of(ext_fields: Mapping[str, str], body: bytes | None, secret_key: str,
                 skip: Collection[str] = (SIGNATURE,)) -> str:
    """calc_signature(content_to_sign(...)) without copying the body into the content."""
    mac = _keyed(secret_key).copy()
    mac.update("".join(value for name, value in sorted(ext_fields.items()) if name not in skip).encode("utf-8"))
    if body:
        mac.update(body)
    return base64.b64encode(mac.digest()).decode("ascii")


def sign(cmd: RemotingCommand, creds: Credentials) -> RemotingCommand:
    """Add AccessKey, SecurityToken (when there is one) and Signature to `cmd`. The fields are
    copied first: a caller may share its header dict between requests."""
    ext = dict(cmd.ext_fields)
    ext.pop(SIGNATURE, None)
    ext[ACCESS_KEY] = creds.access_key
    if creds.security_token is not None:
        ext[SECURITY_TOKEN] = creds.security_token
    ext[SIGNATURE] = signature_of(ext, cmd.body, creds.secret_key)
    cmd.ext_fields = ext
    return cmd


def signer_for(creds: Credentials | None) -> Callable[[RemotingCommand], object] | None:
    """What a RemotingClient calls on each request; None without credentials."""
    if creds is None:
        return None
    return lambda cmd: sign(cmd, creds)
