"""A broker's topic table written before it starts, for the registration tests."""

from __future__ import annotations

import json
import time
from pathlib import Path


def seed_topics(store_dir: Path, count: int) -> list[str]:
    """Write `count` topics into the broker's config/topics.json (its own format) before it
    starts: a big table without creating it one topic at a time."""
    names = [f"seed-{i:05d}" for i in range(count)]
    table = {n: {"topicName": n, "readQueueNums": 2, "writeQueueNums": 2, "perm": 6, "topicSysFlag": 0,
                 "order": False, "topicFilterType": "SINGLE_TAG"} for n in names}
    (store_dir / "config").mkdir(parents=True, exist_ok=True)
    (store_dir / "config" / "topics.json").write_text(json.dumps(
        {"dataVersion": {"counter": 7, "timestamp": int(time.time() * 1000)}, "topicConfigTable": table}))
    return names
