"""An ACL file kept current: read at start (a file that cannot be read stops the start), then
polled for changes; a changed file that is not valid keeps the rules in force and says why."""

from __future__ import annotations

import asyncio
import logging
import os
from pathlib import Path

from .rules import AclConfigError, AclRules, load_rules

log = logging.getLogger("ferrymq.acl")


def _stamp(path: Path) -> tuple[int, int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_mtime_ns, st.st_size, st.st_ino)


class AclFile:
    def __init__(self, path: Path, *, poll_interval: float = 1.0) -> None:
        self.path = path
        self.poll_interval = poll_interval
        self._stamp = _stamp(path)
        self.rules: AclRules = load_rules(path)
        self.version = 1  # reloads that took effect, plus one
        self.last_error: str | None = None

    def reload_if_changed(self) -> bool:
        """Reload when the file changed since it was last read; True when new rules apply."""
        stamp = _stamp(self.path)
        if stamp == self._stamp:
            return False
        self._stamp = stamp
        try:
            rules = load_rules(self.path)
        except AclConfigError as exc:
            self.last_error = exc.reason
            log.error("%s; the rules read before stay in force", exc)
            return False
        self.rules = rules
        self.version += 1
        self.last_error = None
        log.info("ACL file %s reloaded: %d accounts, %d globally white-listed address patterns",
                 self.path, len(rules.accounts), len(rules.global_white))
        return True

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self.poll_interval)
            try:
                self.reload_if_changed()
            except Exception:
                log.exception("checking ACL file %s failed", self.path)
