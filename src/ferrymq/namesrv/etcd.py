"""The few etcd v3 calls the controller quorum needs (docs/replication.md, "Three controllers"),
over etcd's HTTP/JSON gateway (`/v3/kv/...`, `/v3/lease/...`) with the standard library: keys
and values travel base64-encoded, 64-bit numbers as JSON strings.

Blocking calls: the quorum runs them in a worker thread. Every call goes to the endpoint that
answered last, then to the others in turn; a member cut off from its cluster's majority cannot
answer a linearizable request, so a call times out there and moves on."""

from __future__ import annotations

import base64
import http.client
import json
import urllib.parse
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..common.errors import FerryMQError


class EtcdUnavailableError(FerryMQError):
    """No endpoint answered the call."""

    def __init__(self, endpoints: Sequence[str], call: str, reason: str) -> None:
        super().__init__(f"etcd {call}: no endpoint of {', '.join(endpoints)} answered ({reason})")
        self.endpoints = tuple(endpoints)
        self.call = call
        self.reason = reason


@dataclass(frozen=True, slots=True)
class KeyValue:
    value: bytes
    create_revision: int
    mod_revision: int
    lease: int


def _b64(data: bytes | str) -> str:
    return base64.b64encode(data.encode() if isinstance(data, str) else data).decode("ascii")


def _kv(raw: dict[str, Any]) -> KeyValue:
    return KeyValue(base64.b64decode(raw.get("value", "")), int(raw.get("create_revision", 0)),
                    int(raw.get("mod_revision", 0)), int(raw.get("lease", 0)))


def parse_endpoints(spec: str) -> list[str]:
    """`http://h:p,http://h:p` (or `;`-separated) -> the list; a bare `h:p` gets http://."""
    out = []
    for part in spec.replace(";", ",").split(","):
        part = part.strip()
        if part and "://" in part and not part.startswith("http://"):
            # The client speaks plain HTTP: an https:// member would fail every call as if down.
            raise ValueError(f"etcd endpoint {part!r}: only http:// client URLs are supported")
        if part:
            out.append(part if "://" in part else f"http://{part}")
    if not out:
        raise ValueError(f"no etcd endpoint in {spec!r}")
    return out


class EtcdClient:
    def __init__(self, endpoints: Sequence[str], timeout: float = 1.0) -> None:
        self.endpoints = list(endpoints)
        self.timeout = timeout
        self._first = 0  # the endpoint that answered last is asked first

    # --- transport ---------------------------------------------------------------------------
    def _post(self, path: str, doc: dict[str, Any]) -> dict[str, Any]:
        body = json.dumps(doc).encode()
        last = "no endpoint"
        n = len(self.endpoints)
        for i in range(n):
            k = (self._first + i) % n
            url = urllib.parse.urlsplit(self.endpoints[k])
            conn = http.client.HTTPConnection(url.hostname or "127.0.0.1", url.port or 2379,
                                              timeout=self.timeout)
            try:
                conn.request("POST", path, body, {"Content-Type": "application/json"})
                resp = conn.getresponse()
                data = resp.read()
            except (OSError, http.client.HTTPException) as exc:
                last = f"{self.endpoints[k]}: {exc or type(exc).__name__}"
                continue
            finally:
                conn.close()
            if resp.status != 200:
                # E.g. 503 from a member without a leader: another member may have one.
                last = f"{self.endpoints[k]}: HTTP {resp.status} {data[:200]!r}"
                continue
            self._first = k
            answer: dict[str, Any] = json.loads(data)
            # The keepalive stream wraps its one answer in "result".
            return answer.get("result", answer) if path.endswith("keepalive") else answer
        raise EtcdUnavailableError(self.endpoints, path, last)

    # --- leases ------------------------------------------------------------------------------
    def grant(self, ttl_s: int) -> tuple[int, int]:
        """A new lease: (id, granted TTL in seconds)."""
        doc = self._post("/v3/lease/grant", {"TTL": ttl_s})
        return int(doc["ID"]), int(doc.get("TTL", 0))

    def keepalive(self, lease_id: int) -> int:
        """The lease's TTL after the refresh; 0 when it has expired."""
        return int(self._post("/v3/lease/keepalive", {"ID": str(lease_id)}).get("TTL", 0))

    def revoke(self, lease_id: int) -> None:
        self._post("/v3/lease/revoke", {"ID": str(lease_id)})

    # --- keys --------------------------------------------------------------------------------
    def get(self, key: str) -> KeyValue | None:
        kvs = self._post("/v3/kv/range", {"key": _b64(key)}).get("kvs") or []
        return _kv(kvs[0]) if kvs else None

    def create(self, key: str, value: bytes, lease_id: int) -> tuple[bool, KeyValue | None]:
        """Put `key` only if it does not exist. (True, the new key) or (False, the holder's)."""
        doc = self._post("/v3/kv/txn", {
            "compare": [{"key": _b64(key), "target": "CREATE", "result": "EQUAL", "create_revision": "0"}],
            "success": [{"request_put": {"key": _b64(key), "value": _b64(value), "lease": str(lease_id)}}],
            "failure": [{"request_range": {"key": _b64(key)}}],
        })
        if doc.get("succeeded"):
            rev = int(doc["header"]["revision"])
            return True, KeyValue(value, rev, rev, lease_id)
        kvs = (doc.get("responses") or [{}])[0].get("response_range", {}).get("kvs") or []
        return False, _kv(kvs[0]) if kvs else None

    def put_if(self, key: str, value: bytes, *, mod_revision: int, guard_key: str,
               guard_create_revision: int) -> int | None:
        """Put `key` if it was last modified at `mod_revision` (0: it does not exist) and
        `guard_key` is still the one created at `guard_create_revision`; the new revision, or
        None when either compare failed."""
        doc = self._post("/v3/kv/txn", {
            "compare": [
                {"key": _b64(key), "target": "MOD", "result": "EQUAL", "mod_revision": str(mod_revision)},
                {"key": _b64(guard_key), "target": "CREATE", "result": "EQUAL",
                 "create_revision": str(guard_create_revision)},
            ],
            "success": [{"request_put": {"key": _b64(key), "value": _b64(value)}}],
        })
        return int(doc["header"]["revision"]) if doc.get("succeeded") else None
