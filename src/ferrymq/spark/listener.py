"""Group commits for the last micro-batch, from the user's driver process.

Spark calls the source's commit(end) for batch N only when it plans batch N+1, so a query
that stops never reports its last batch that way. onQueryProgress carries every completed
batch's end offset; the offsets this source writes name their name server and group, so the
listener needs nothing else to commit them. Listener events arrive asynchronously and in
order: `wait_committed(query)` returns once the query's termination event (which follows
its last progress event) has been handled."""

from __future__ import annotations

import json
import logging
import threading
from typing import Any

from pyspark.sql.streaming.listener import StreamingQueryListener

from .offsets import SourceOffset, is_source_offset

log = logging.getLogger("ferrymq.spark")


class GroupCommitListener(StreamingQueryListener):  # type: ignore[misc]
    def __init__(self) -> None:
        self._lock = threading.Condition()
        self._terminated: set[str] = set()
        self.commits = 0

    def onQueryStarted(self, event: Any) -> None:
        with self._lock:
            self._terminated.discard(str(event.id))

    def onQueryProgress(self, event: Any) -> None:
        # The committing admin client is the driver's alone: imported at the first progress
        # event, not with this module, which the package imports in every Python worker
        # (they unpickle the source, readers and writers), where it would load the client
        # and the reader's modules for nothing.
        from .cluster import commit_group

        for source in event.progress.sources:
            try:
                doc = json.loads(source.endOffset) if source.endOffset else None
            except (TypeError, ValueError):
                continue
            if not is_source_offset(doc):
                continue
            offset = SourceOffset.from_json(doc)
            if offset.group and offset.namesrv:
                commit_group(offset.namesrv, offset.group, offset.queues)
                self.commits += 1

    def onQueryIdle(self, event: Any) -> None:
        pass

    def onQueryTerminated(self, event: Any) -> None:
        with self._lock:
            self._terminated.add(str(event.id))
            self._lock.notify_all()

    def wait_terminated(self, query_id: str, timeout: float) -> bool:
        with self._lock:
            return self._lock.wait_for(lambda: query_id in self._terminated, timeout)
