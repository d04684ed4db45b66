"""NOTIFY_CONSUMER_IDS_CHANGED, coalesced.

Telling every member of a group on every join or leave costs members² notifications when a
large group starts (2,000 members: 2 M). Here a group's members are told at most once per
delay: a change to a quiet group is told at once (a member joining a settled group is not
kept waiting, which would mean more messages consumed twice on the handover), changes within
the delay after that are gathered into one notice at its end. A member that has not yet taken an earlier notice
for the group (its connection is not being read) is not sent another: a notice carries only
the group's name, so one outstanding says all there is to say."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterable

from ..common.codes import RequestCode
from ..common.headers import fields
from ..remoting import Connection, RemotingCommand

log = logging.getLogger("ferrymq.broker")


class GroupChangeNotifier:
    def __init__(self, members_of: Callable[[str], Iterable[Connection]], delay: float) -> None:
        self._members_of = members_of
        self.delay = delay
        self._pending: dict[str, asyncio.TimerHandle] = {}
        self._last_flush: dict[str, float] = {}
        self._outstanding: set[tuple[Connection, str]] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self.sent = 0  # notifications written, for runtime figures and tests

    def changed(self, group: str) -> None:
        if group in self._pending:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no loop (a tool using the registry alone): nobody to tell
            return
        since = loop.time() - self._last_flush.get(group, float("-inf"))
        if since >= self.delay:
            self._flush(group)
        else:
            self._pending[group] = loop.call_later(self.delay - since, self._flush, group)

    def _flush(self, group: str) -> None:
        self._pending.pop(group, None)
        loop = asyncio.get_running_loop()
        self._last_flush[group] = loop.time()
        for conn in self._members_of(group):
            key = (conn, group)
            if conn.closed or key in self._outstanding:
                continue
            self._outstanding.add(key)
            task = loop.create_task(self._notify(conn, group, key))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _notify(self, conn: Connection, group: str, key: tuple[Connection, str]) -> None:
        req = RemotingCommand.request(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED,
                                      ext_fields=fields(consumerGroup=group))
        try:
            await conn.invoke_oneway(req)
            self.sent += 1
        except Exception as exc:  # the member may be gone; it rebalances on its own timer
            log.debug("notify consumer %s failed: %s", conn.remote_addr, exc)
        finally:
            self._outstanding.discard(key)

    def close(self) -> None:
        for handle in self._pending.values():
            handle.cancel()
        self._pending.clear()
        self._last_flush.clear()
        for task in self._tasks:
            with contextlib.suppress(RuntimeError):
                task.cancel()
