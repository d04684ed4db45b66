"""Message lookup for the dashboard: by id (unique or offset id) or by key, and a message's
trace as a timeline of what happened to it (stored, retried, dead-lettered, re-driven) and
where each consuming group stands with it."""

from __future__ import annotations

from typing import Any

from ..cli.render import message_detail
from ..client.admin_async import AsyncAdminClient
from ..client.errors import MessageNotFoundError, NoRouteError
from ..common import props as P
from ..common.errors import FerryMQError
from ..common.ids import is_offset_msg_id, is_uniq_id
from ..common.message import MessageExt
from ..common.names import SCHEDULE_TOPIC, is_dlq_topic, is_retry_topic

BODY_PREVIEW = 4096


async def lookup(admin: AsyncAdminClient, msg_id: str, topic: str | None) -> MessageExt:
    """The message with this unique id or offset id (its original copy when it was retried)."""
    offset_id, uniq_id = is_offset_msg_id(msg_id), is_uniq_id(msg_id)
    if not (offset_id or uniq_id):
        raise ValueError(f"{msg_id!r} is not a message id (32 or 56 hex digits: a msg_id or an offset_msg_id)")
    errors: list[str] = []
    if topic and uniq_id:
        try:
            return await admin.query_by_uniq_key(topic, msg_id)
        except FerryMQError as exc:
            errors.append(str(exc))
    if offset_id:
        try:
            return await admin.view_message(msg_id)
        except FerryMQError as exc:
            errors.append(str(exc))
    if uniq_id and not topic:
        found = await admin.find_by_uniq_key(msg_id)
        if found:
            return found[0]
        errors.append("no topic has a message with this unique id")
    raise MessageNotFoundError(f"message {msg_id}: {'; '.join(errors)}")


def detail_json(msg: MessageExt) -> dict[str, Any]:
    out = message_detail(msg)
    out.pop("body_b64", None)
    text = msg.body[:BODY_PREVIEW].decode("utf-8", "replace")
    out["body"] = text
    out["body_size"] = len(msg.body)
    out["body_truncated"] = len(msg.body) > BODY_PREVIEW
    return out


def _event(msg: MessageExt) -> dict[str, Any]:
    """One stored copy as a timeline event."""
    if is_dlq_topic(msg.topic):
        kind, text = "dead-lettered", f"moved to {msg.topic} after {msg.reconsume_times} attempts"
    elif is_retry_topic(msg.topic):
        redriven = msg.reconsume_times == 0 and P.PROPERTY_ORIGIN_MESSAGE_ID in msg.properties
        kind = "re-driven" if redriven else "retry"
        text = (f"sent back to {msg.topic} from the dead-letter queue" if redriven
                else f"retry #{msg.reconsume_times} stored in {msg.topic}")
    elif msg.topic == SCHEDULE_TOPIC:
        level = msg.properties.get(P.PROPERTY_DELAY_TIME_LEVEL, "?")
        kind, text = "scheduled", f"waiting in the delay schedule (level {level})"
    else:
        kind, text = "stored", f"stored in {msg.topic}"
    return {
        "t": msg.store_timestamp,
        "kind": kind,
        "text": text,
        "topic": msg.topic,
        "broker": msg.broker,
        "queue_id": msg.queue_id,
        "queue_offset": msg.queue_offset,
        "offset_msg_id": msg.offset_msg_id,
        "reconsume_times": msg.reconsume_times,
    }


async def trace(admin: AsyncAdminClient, msg: MessageExt) -> dict[str, Any]:
    """Every stored copy of the message in time order, born time first, and for each copy
    whether each group consuming its topic has consumed it (`msg trace`'s data)."""
    copies = (await admin.find_by_uniq_key(msg.msg_id) if is_uniq_id(msg.msg_id) else []) or [msg]
    tracks: list[dict[str, Any]] = []
    for copy in copies:
        try:
            tracks += [t.to_json() for t in await admin.message_tracks(copy)]
        except NoRouteError:
            continue  # an internal topic (the delay schedule) no group consumes
    born = {"t": msg.born_timestamp, "kind": "sent", "text": f"sent by {msg.born_host or 'a producer'}",
            "topic": msg.topic}
    events = [born, *(_event(c) for c in copies)]
    for t in tracks:
        if t["consumed"] and t["track"] in ("CONSUMED", "NOT_ONLINE", "PULL"):
            text = f"consumed by {t['group']} (offset {t['consumer_offset']} past {t['queue_offset']})"
            events.append({"t": None, "kind": "consumed", "topic": t["topic"], "text": text})
    return {"msg_id": msg.msg_id, "events": events, "tracks": tracks, "copies": len(copies)}
