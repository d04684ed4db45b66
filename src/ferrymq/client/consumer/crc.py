"""The client's body CRC check (RocketMQ's client checks CRC when it decodes a pull): a
message whose body does not match the CRC stored with it is never handed to a listener.

The broker already leaves out records damaged at rest; this catches what it trusts (records
it wrote this run and verified, damaged afterwards) and what a broker without the check
sends. A compressed body is stored compressed and its CRC is of those bytes, which the
decoder has already replaced; such a message is not checked here."""

from __future__ import annotations

import logging

from ...common.message import MessageExt
from ...common.record import SYSFLAG_COMPRESSED, body_crc

log = logging.getLogger("ferrymq.client.pull")


def drop_corrupt(msgs: list[MessageExt], where: str) -> list[MessageExt]:
    """`msgs` without those whose body fails its CRC; each of those is logged once here."""
    bad = [m for m in msgs
           if not m.sys_flag & SYSFLAG_COMPRESSED and body_crc(m.body) != m.body_crc]
    if not bad:
        return msgs
    for m in bad:
        log.error("%s: message at queue offset %d (commit-log offset %d) fails its body CRC; "
                  "it is skipped", where, m.queue_offset, m.commit_log_offset)
    ids = {id(m) for m in bad}
    return [m for m in msgs if id(m) not in ids]
