"""The name server's KV config (RocketMQ's KVConfigManager): namespace -> key -> value, e.g.
ORDER_TOPIC_CONFIG's per-topic queue layout. Written whole to `kvConfig.json` after every
change, as RocketMQ does, when the name server was given a path; else kept in memory."""

from __future__ import annotations

import threading
from pathlib import Path

from ..common import jsonx
from ..common.durable import atomic_write, read_json_file

# RocketMQ's NamesrvUtil.NAMESPACE_ORDER_TOPIC_CONFIG: a topic's orderTopicConf, added to its
# route when orderMessageEnable is on.
ORDER_TOPIC_CONFIG = "ORDER_TOPIC_CONFIG"


class KvConfig:
    def __init__(self, path: Path | None = None) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._table: dict[str, dict[str, str]] = {}
        if path is not None:
            doc = read_json_file(path, {})
            table = doc.get("configTable") if isinstance(doc, dict) else None
            for namespace, items in (table or {}).items():
                if isinstance(items, dict):
                    self._table[str(namespace)] = {str(k): str(v) for k, v in items.items()}

    def get(self, namespace: str, key: str) -> str | None:
        with self._lock:
            return self._table.get(namespace, {}).get(key)

    def namespace(self, namespace: str) -> dict[str, str]:
        with self._lock:
            return dict(self._table.get(namespace, {}))

    def put(self, namespace: str, key: str, value: str) -> None:
        with self._lock:
            self._table.setdefault(namespace, {})[key] = value
            self._persist()

    def delete(self, namespace: str, key: str) -> bool:
        """False when there was no such key."""
        with self._lock:
            items = self._table.get(namespace)
            if items is None or key not in items:
                return False
            del items[key]
            if not items:
                del self._table[namespace]
            self._persist()
            return True

    def _persist(self) -> None:
        if self.path is not None:
            atomic_write(self.path, jsonx.dumps_bytes({"configTable": self._table}))
