"""What a broker's store reports about damage at rest (QUERY_STORE_DAMAGE), as values."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from ..common import jsonx


@dataclass(frozen=True)
class DamagedRecordInfo:
    broker: str
    phys_offset: int
    size: int
    segment: str
    reason: str
    found_by: str  # read, scrub, tail, or entry (a damaged consume-queue entry; its record is sound)
    topic: str  # "" when the damage hides it (found by the scrub, never read)
    queue_id: int
    queue_offset: int

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class SkippedRangeInfo:
    broker: str
    topic: str
    queue_id: int
    from_offset: int
    to_offset: int

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class StoreDamage:
    records: list[DamagedRecordInfo]
    skipped: list[SkippedRangeInfo]

    def to_json(self) -> dict[str, Any]:
        return {"records": [r.to_json() for r in self.records],
                "skipped": [s.to_json() for s in self.skipped]}


def parse_store_damage(broker: str, body: bytes) -> StoreDamage:
    doc = jsonx.loads(body or b"{}")
    records = [
        DamagedRecordInfo(broker, int(r["physOffset"]), int(r["size"]), str(r["segment"]),
                          str(r["reason"]), str(r["foundBy"]), str(r.get("topic", "")),
                          int(r.get("queueId", -1)), int(r.get("queueOffset", -1)))
        for r in doc.get("records", [])
    ]
    skipped = [
        SkippedRangeInfo(broker, str(s["topic"]), int(s["queueId"]), int(s["fromOffset"]),
                         int(s["toOffset"]))
        for s in doc.get("skipped", [])
    ]
    return StoreDamage(records, skipped)
