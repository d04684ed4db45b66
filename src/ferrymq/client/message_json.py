"""Fetched messages as JSON-ready dicts, the one shape the command line and the dashboard both
show."""

from __future__ import annotations

import base64
from typing import Any

from ..common.message import MessageExt


def body_fields(body: bytes) -> dict[str, Any]:
    """UTF-8 text when the body is text, base64 otherwise (flagged with body_b64)."""
    try:
        return {"body": body.decode("utf-8")}
    except UnicodeDecodeError:
        return {"body": base64.b64encode(body).decode("ascii"), "body_b64": True}


def message_json(m: MessageExt) -> dict[str, Any]:
    out: dict[str, Any] = {
        "msg_id": m.msg_id,
        "topic": m.topic,
        "queue_id": m.queue_id,
        "queue_offset": m.queue_offset,
        "keys": m.keys,
        "tags": m.tags,
    }
    out.update(body_fields(m.body))
    out["reconsume_times"] = m.reconsume_times
    return out


def message_detail(m: MessageExt) -> dict[str, Any]:
    """Everything known about one message (msg show / msg find)."""
    out = message_json(m)
    out.update(
        {
            "offset_msg_id": m.offset_msg_id,
            "broker": m.broker,
            "commit_log_offset": m.commit_log_offset,
            "born_host": m.born_host,
            "born_timestamp": m.born_timestamp,
            "store_host": m.store_host,
            "store_timestamp": m.store_timestamp,
            "properties": dict(m.properties),
        }
    )
    return out


def preview(body: bytes, limit: int = 60) -> str:
    text = body.decode("utf-8", "replace")
    text = text.replace("\n", " ").replace("\r", " ")
    return text if len(text) <= limit else text[: limit - 1] + "…"
