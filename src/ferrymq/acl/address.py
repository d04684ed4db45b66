"""Remote address patterns of plain_acl.yml (RocketMQ's RemoteAddressStrategyFactory):
blank (matches nothing), `*` (everything), one address, `a,b,c`, `192.168.1.{1,2}`, and IPv4
ranges with `*` or `n-m` segments (`192.168.1.*`, `10.0.1-20.*`)."""

from __future__ import annotations

import functools
import ipaddress
from dataclasses import dataclass

from ..common.errors import FerryMQError


class AddressPatternError(FerryMQError, ValueError):
    def __init__(self, pattern: str, reason: str) -> None:
        super().__init__(f"remote address {pattern!r}: {reason}")
        self.pattern = pattern
        self.reason = reason


_ALL = frozenset({"*", "*.*.*.*", "*:*:*:*:*:*:*:*"})


@dataclass(frozen=True, slots=True)
class AddressPattern:
    text: str
    everything: bool = False
    addresses: frozenset[str] = frozenset()
    # IPv4 ranges: (low, high) per segment.
    segments: tuple[tuple[int, int], ...] = ()

    def matches(self, ip: str) -> bool:
        if self.everything:
            return True
        if not ip or not (self.addresses or self.segments):
            return False
        norm = normalize_ip(ip)
        if norm is None:
            return False
        if norm in self.addresses:
            return True
        if self.segments and "." in norm:
            parts = norm.split(".")
            return all(lo <= int(p) <= hi for p, (lo, hi) in zip(parts, self.segments, strict=True))
        return False


NOTHING = AddressPattern("")


@functools.lru_cache(maxsize=4096)
def normalize_ip(text: str) -> str | None:
    """The address as compared: IPv4 dotted, IPv6 exploded, an IPv4-mapped IPv6 as IPv4."""
    try:
        addr = ipaddress.ip_address(text.strip().strip("[]"))
    except ValueError:
        return None
    if isinstance(addr, ipaddress.IPv6Address):
        if addr.ipv4_mapped is not None:
            return str(addr.ipv4_mapped)
        return addr.exploded
    return str(addr)


def host_of(remote_addr: str) -> str:
    """"1.2.3.4:5678" or "::1:5678" -> the host part, as RocketMQ cuts at the last colon."""
    host, sep, _ = remote_addr.rpartition(":")
    return host if sep else remote_addr


def parse_address_pattern(text: str | None) -> AddressPattern:
    if text is None or not str(text).strip():
        return NOTHING
    pattern = str(text).strip()
    if pattern in _ALL:
        return AddressPattern(pattern, everything=True)
    if pattern.endswith("}"):
        head, brace, inner = pattern.rpartition("{")
        if not brace or not head or head[-1] not in ".:":
            raise AddressPatternError(pattern, "a {a,b} list must be the last part of the address")
        return _addresses(pattern, [head + item.strip() for item in inner[:-1].split(",")])
    if "," in pattern:
        return _addresses(pattern, pattern.split(","))
    if "*" in pattern or "-" in pattern:
        return _range(pattern)
    return _addresses(pattern, [pattern])


def _addresses(pattern: str, items: list[str]) -> AddressPattern:
    found = set()
    for item in items:
        norm = normalize_ip(item)
        if norm is None:
            raise AddressPatternError(pattern, f"{item.strip()!r} is not an IP address")
        found.add(norm)
    return AddressPattern(pattern, addresses=frozenset(found))


def _range(pattern: str) -> AddressPattern:
    if ":" in pattern:
        raise AddressPatternError(pattern, "IPv6 ranges are not supported; list the addresses")
    parts = pattern.split(".")
    if len(parts) != 4:
        raise AddressPatternError(pattern, "an IPv4 range has four parts")
    segments = []
    for part in parts:
        part = part.strip()
        if part == "*":
            segments.append((0, 255))
            continue
        lo_text, dash, hi_text = part.partition("-")
        try:
            lo = int(lo_text)
            hi = int(hi_text) if dash else lo
        except ValueError:
            raise AddressPatternError(pattern, f"{part!r} is not a number, n-m or *") from None
        if not 0 <= lo <= hi <= 255:
            raise AddressPatternError(pattern, f"{part!r} is not within 0..255 (low first)")
        segments.append((lo, hi))
    return AddressPattern(pattern, segments=tuple(segments))
