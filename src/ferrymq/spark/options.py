"""The `ferrymq` source and sink options, parsed once into frozen dataclasses.

Names follow Spark's Kafka source where the meaning is the same (startingOffsets,
endingOffsets, startingOffsetsByTimestamp, maxOffsetsPerTrigger, minOffsetsPerTrigger,
maxTriggerDelay, failOnDataLoss); the filter keeps the names of the old RocketMQ Spark
connector (subExpression, with expressionType TAG or SQL92). Option keys are case-insensitive, as Spark passes them.
A name the reader or writer does not take is refused (UnknownOptionError, with the closest
valid name): Spark hands a source every option it was given, so a misspelt one would
otherwise be ignored without a word."""

from __future__ import annotations

import difflib
import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum

from ..client.consumer.subscription import SQL92, SUB_ALL, TAG, Subscription
from ..common.addrs import split_addrs
from ..common.names import InvalidNameError as TopicNameError
from ..common.names import validate_group, validate_topic
from ..common.sql92 import SelectorError, compile_selector
from .errors import OffsetFormatError, OptionError, UnknownOptionError
from .offsets import EARLIEST, LATEST, QueueKey, parse_queue_json

DEFAULT_NAMESRV = "127.0.0.1:9876"
DEFAULT_PULL_BATCH = 1024  # the broker's cap on messages per PULL_MESSAGE
DEFAULT_ROWS_PER_BATCH = 8192  # Arrow batch size: amortises per-kernel overhead in decoding
DEFAULT_PRODUCER_GROUP = "ferrymq-spark-writer"
# The exactly-once sink's group: its producers answer the broker's transaction checks, which
# the at-least-once sink's plain producers would leave unanswered.
DEFAULT_EOS_PRODUCER_GROUP = "ferrymq-spark-eos"
# Rows per batched send: the broker's put costs per request as much as per message for small
# rows (100 B rows went out 40 % faster in sends of 4096 than of 256); MAX_BATCH_BYTES caps
# the bytes.
DEFAULT_SEND_BATCH = 4096
# Rows per half message of the exactly-once sink: every half also costs the driver one
# END_TRANSACTION at commit.
DEFAULT_EOS_SEND_BATCH = 4096
AT_LEAST_ONCE = "at-least-once"
EXACTLY_ONCE = "exactly-once"
GUARANTEES = (AT_LEAST_ONCE, EXACTLY_ONCE)
DEFAULT_MAX_TRIGGER_DELAY = "15m"  # Kafka's default

_DURATION = re.compile(r"(\d+)\s*(us|ms|s|m|min|h|d)?")
_UNIT_MS = {"us": 0.001, "ms": 1, None: 1, "s": 1000, "m": 60_000, "min": 60_000,
            "h": 3_600_000, "d": 86_400_000}


# Option names, as documented (Spark lower-cases the keys; they are compared lower-cased).
READER_OPTIONS = (
    "namesrv", "topic", "group", "startingOffsets", "startingOffsetsByTimestamp",
    "failOnDataLoss", "includeHeaders", "subExpression", "expressionType", "pullBatchSize",
    "rowsPerBatch", "maxRowsPerPartition", "maxPartitions",
)
STREAM_READER_OPTIONS = ("maxOffsetsPerTrigger", "minOffsetsPerTrigger", "maxTriggerDelay")
BATCH_READER_OPTIONS = ("endingOffsets", "endingOffsetsByTimestamp")
WRITER_OPTIONS = ("namesrv", "topic", "producerGroup", "sendBatchSize", "guarantee")
BATCH_WRITER_OPTIONS = ("queryId", "batchId")
# What DataStreamWriter puts among a sink's options itself (from .option(), .queryName()).
SPARK_STREAM_WRITER_OPTIONS = ("checkpointLocation", "queryName")


def check_names(options: Mapping[str, str], valid: tuple[str, ...], kind: str,
                elsewhere: Mapping[str, str] | None = None) -> None:
    """Refuse a key that is not in `valid` (case-insensitively). `elsewhere` maps names of the
    other mode (batch or streaming) to why they do not apply here."""
    lowered = {name.lower(): name for name in valid}
    for key, value in options.items():
        low = key.lower()
        if low in lowered:
            continue
        shown = None if value is None else str(value)
        for name, reason in (elsewhere or {}).items():
            if name.lower() == low:
                raise OptionError(name, shown, reason)
        if low == "path":
            raise OptionError(key, shown, "ferrymq takes no path (load() and save() without"
                              " one); name the topic with option('topic', ...)")
        close = difflib.get_close_matches(low, list(lowered), n=1, cutoff=0.6)
        raise UnknownOptionError(key, shown, kind, sorted(valid, key=str.lower),
                                 lowered[close[0]] if close else None)


class StartKind(Enum):
    GROUP = "group"
    EARLIEST = "earliest"
    LATEST = "latest"
    OFFSETS = "offsets"  # per-queue JSON; queues not listed start at earliest
    TIMESTAMP = "timestamp"  # per-queue JSON or one epoch-ms value for every queue


@dataclass(frozen=True)
class Position:
    kind: StartKind
    offsets: Mapping[QueueKey, int] = field(default_factory=dict)
    timestamps: Mapping[QueueKey, int] = field(default_factory=dict)
    timestamp: int | None = None  # applies to queues without their own entry


@dataclass(frozen=True)
class ReaderOptions:
    namesrv: str
    topics: tuple[str, ...]
    group: str | None
    starting: Position
    ending: Position  # batch reads only
    max_offsets_per_trigger: int | None
    fail_on_data_loss: bool
    pull_batch_size: int
    rows_per_batch: int
    max_rows_per_partition: int | None
    min_offsets_per_trigger: int | None = None
    # At most this many Spark partitions per read (None: one per queue range, as Kafka's
    # source has one per topic partition); queue ranges are grouped, balanced by rows.
    max_partitions: int | None = None
    max_trigger_delay_ms: int = 15 * 60_000
    # The tags a row must carry ('*': every row); filtered by the broker, checked again here.
    tags: frozenset[str] = frozenset()
    sub_expression: str = SUB_ALL
    expression_type: str = TAG  # SQL92: sub_expression is a selector the broker evaluates
    # Kafka's `headers` column (the properties as array<struct<key, value>>) after the others.
    include_headers: bool = False


@dataclass(frozen=True)
class WriterOptions:
    namesrv: str
    topic: str | None  # rows without a `topic` column (or with a null one) go here
    producer_group: str
    send_batch_size: int
    # Batch writes only: what the UNIQ_KEYs derive from instead of a random write id, so a
    # foreachBatch function can make its writes replay-stable (queryId, batchId of the batch).
    query_id: str | None = None
    batch_id: int = 0
    guarantee: str = AT_LEAST_ONCE

    @property
    def exactly_once(self) -> bool:
        return self.guarantee == EXACTLY_ONCE


def _get(options: Mapping[str, str], name: str) -> str | None:
    # Spark hands a case-insensitive dict; plain dicts (tests) are matched the same way.
    lowered = name.lower()
    for key, value in options.items():
        if key.lower() == lowered:
            return None if value is None else str(value)
    return None


def _int(
    options: Mapping[str, str], name: str, default: int | None, *, minimum: int = 1
) -> int | None:
    text = _get(options, name)
    if text is None or text.strip() == "":
        return default
    try:
        value = int(text)
    except ValueError as exc:
        raise OptionError(name, text, "expected an integer") from exc
    if value < minimum:
        raise OptionError(name, text, f"must be at least {minimum}")
    return value


def _bool(options: Mapping[str, str], name: str, default: bool) -> bool:
    text = _get(options, name)
    if text is None:
        return default
    if text.strip().lower() in ("true", "1", "yes"):
        return True
    if text.strip().lower() in ("false", "0", "no"):
        return False
    raise OptionError(name, text, "expected true or false")


def parse_duration_ms(name: str, text: str) -> int:
    """Spark's time strings: "100ms", "30s", "15m", "2h", "1d"; a bare number is milliseconds."""
    match = _DURATION.fullmatch(text.strip().lower())
    if match is None:
        raise OptionError(name, text, "expected a duration such as 100ms, 30s, 15m or 1h")
    return int(int(match.group(1)) * _UNIT_MS[match.group(2)])


def parse_tags(text: str | None) -> tuple[str, frozenset[str]]:
    """RocketMQ's tag expression: "TagA || TagB", or "*" (or nothing) for every message."""
    if text is None or not text.strip() or text.strip() == SUB_ALL:
        return SUB_ALL, frozenset()
    try:
        sub = Subscription.parse("", text)
    except ValueError as exc:  # no tag at all, or what looks like an SQL92 selector
        raise OptionError("subExpression", text,
                          f"{exc} (with Spark: expressionType SQL92 for an SQL92 selector)") from exc
    if SUB_ALL in sub.tags:
        raise OptionError("subExpression", text, "'*' cannot be combined with tags")
    return sub.expression, sub.tags


def parse_sub_expression(text: str | None, expression_type: str | None = None) -> tuple[str, frozenset[str], str]:
    """`subExpression` read as `expressionType` says: TAG (the default) gives the expression and
    its tags; SQL92 gives a selector the broker evaluates on each message's properties,
    checked here so a mistake fails the query at once. Returns (expression, tags, type)."""
    kind = (expression_type or TAG).strip().upper()
    if kind == SQL92:
        if text is None or not text.strip():
            raise OptionError("subExpression", text, "expressionType SQL92 needs a selector")
        try:
            compile_selector(text)
        except SelectorError as exc:
            raise OptionError("subExpression", text, str(exc)) from exc
        return text, frozenset(), SQL92
    if kind != TAG:
        raise OptionError("expressionType", expression_type, "expected TAG or SQL92")
    expression, tags = parse_tags(text)
    return expression, tags, TAG


def namesrv_of(options: Mapping[str, str]) -> str:
    text = _get(options, "namesrv") or os.environ.get("FERRYMQ_NAMESRV") or DEFAULT_NAMESRV
    # Checked when the query is defined: a malformed address otherwise fails every task
    # attempt on the executors, each with a traceback of its own.
    addrs = split_addrs(text)
    for addr in addrs:
        host, _, port = addr.rpartition(":")
        if not host or not port.isdigit():
            raise OptionError("namesrv", text, "expected HOST:PORT (several ';'-separated)")
    if not addrs:
        raise OptionError("namesrv", text, "expected HOST:PORT")
    return text.strip()


def parse_topics(text: str | None) -> tuple[str, ...]:
    if text is None:
        raise OptionError("topic", None, "name one topic or a comma-separated list")
    topics = tuple(dict.fromkeys(t.strip() for t in text.split(",") if t.strip()))
    if not topics:
        raise OptionError("topic", text, "name one topic or a comma-separated list")
    for t in topics:
        try:
            validate_topic(t)
        except TopicNameError as exc:
            raise OptionError("topic", text, str(exc)) from exc
    return topics


def parse_position(
    options: Mapping[str, str], prefix: str, default: StartKind, *, allow_group: bool
) -> Position:
    """`<prefix>Offsets` and `<prefix>OffsetsByTimestamp` (prefix: starting or ending)."""
    by_ts_name = f"{prefix}OffsetsByTimestamp"
    by_ts = _get(options, by_ts_name)
    if by_ts is not None and by_ts.strip():
        text = by_ts.strip()
        if text.lstrip("-").isdigit():
            return Position(StartKind.TIMESTAMP, timestamp=int(text))
        try:
            return Position(StartKind.TIMESTAMP, timestamps=parse_queue_json(text))
        except OffsetFormatError as exc:
            raise OptionError(by_ts_name, text, exc.reason) from exc
    name = f"{prefix}Offsets"
    text = (_get(options, name) or "").strip()
    if not text:
        return Position(default)
    lowered = text.lower()
    if lowered in ("earliest", "latest") or (lowered == "group" and allow_group):
        return Position(StartKind(lowered))
    if lowered == "group":
        raise OptionError(name, text, "'group' is only a starting position")
    try:
        offsets = parse_queue_json(text)
    except OffsetFormatError as exc:
        raise OptionError(
            name, text, f"expected group, earliest, latest or JSON: {exc.reason}"
        ) from exc
    bad = [str(k) for k, v in offsets.items() if v < EARLIEST]
    if bad:
        raise OptionError(name, text, f"offsets below -2 for {', '.join(bad)}")
    return Position(StartKind.OFFSETS, offsets=offsets)


def reader_options(options: Mapping[str, str], *, streaming: bool) -> ReaderOptions:
    if streaming:
        check_names(options, READER_OPTIONS + STREAM_READER_OPTIONS, "stream reader",
                    dict.fromkeys(BATCH_READER_OPTIONS, "is for batch reads only"))
    else:
        check_names(options, READER_OPTIONS + BATCH_READER_OPTIONS, "batch reader",
                    dict.fromkeys(STREAM_READER_OPTIONS, "is for streaming reads only"))
    group = _get(options, "group")
    if group is not None:
        group = group.strip() or None
    if group is not None:
        try:
            validate_group(group)
        except TopicNameError as exc:
            raise OptionError("group", group, str(exc)) from exc
    # A stream with a group resumes where the group left off (falling back to earliest when it
    # never committed); without a group, like Kafka: streams start at latest, batches at earliest.
    default_start = (
        StartKind.GROUP if group else (StartKind.LATEST if streaming else StartKind.EARLIEST)
    )
    starting = parse_position(options, "starting", default_start, allow_group=True)
    if starting.kind is StartKind.GROUP and group is None:
        raise OptionError("startingOffsets", "group", "needs the 'group' option")
    ending = parse_position(options, "ending", StartKind.LATEST, allow_group=False)
    max_rows = _int(options, "maxOffsetsPerTrigger", None)
    min_rows = _int(options, "minOffsetsPerTrigger", None)
    delay_text = _get(options, "maxTriggerDelay")
    if min_rows is not None and max_rows is not None and min_rows > max_rows:
        raise OptionError(
            "minOffsetsPerTrigger",
            str(min_rows),
            f"is higher than maxOffsetsPerTrigger ({max_rows})",
        )
    delay_ms = parse_duration_ms("maxTriggerDelay", delay_text or DEFAULT_MAX_TRIGGER_DELAY)
    expression, tags, expression_type = parse_sub_expression(_get(options, "subExpression"),
                                                             _get(options, "expressionType"))
    return ReaderOptions(
        namesrv=namesrv_of(options),
        topics=parse_topics(_get(options, "topic")),
        group=group,
        starting=starting,
        ending=ending,
        max_offsets_per_trigger=max_rows,
        fail_on_data_loss=_bool(options, "failOnDataLoss", True),
        pull_batch_size=_int(options, "pullBatchSize", DEFAULT_PULL_BATCH) or DEFAULT_PULL_BATCH,
        rows_per_batch=_int(options, "rowsPerBatch", DEFAULT_ROWS_PER_BATCH)
        or DEFAULT_ROWS_PER_BATCH,
        max_rows_per_partition=_int(options, "maxRowsPerPartition", None),
        max_partitions=_int(options, "maxPartitions", None),
        min_offsets_per_trigger=min_rows,
        max_trigger_delay_ms=delay_ms,
        tags=tags,
        sub_expression=expression,
        expression_type=expression_type,
        include_headers=include_headers(options),
    )


def include_headers(options: Mapping[str, str]) -> bool:
    """What the source's schema depends on. Spark asks for the schema at load(), before it
    knows whether the read is a stream: names no reader takes are refused here already."""
    check_names(options, READER_OPTIONS + STREAM_READER_OPTIONS + BATCH_READER_OPTIONS,
                "reader")
    return _bool(options, "includeHeaders", False)


def writer_options(options: Mapping[str, str], *, streaming: bool = False) -> WriterOptions:
    if streaming:
        check_names(options, WRITER_OPTIONS + SPARK_STREAM_WRITER_OPTIONS, "stream writer",
                    dict.fromkeys(BATCH_WRITER_OPTIONS, "is for batch writes only (a stream's"
                                  " UNIQ_KEYs derive from its query id and batch id)"))
    else:
        check_names(options, WRITER_OPTIONS + BATCH_WRITER_OPTIONS, "batch writer")
    topic = _get(options, "topic")
    if topic is not None:
        topic = topic.strip() or None
    if topic is not None:
        try:
            validate_topic(topic)
        except TopicNameError as exc:
            raise OptionError("topic", topic, str(exc)) from exc
    guarantee = (_get(options, "guarantee") or AT_LEAST_ONCE).strip().lower()
    if guarantee not in GUARANTEES:
        raise OptionError("guarantee", guarantee, f"expected one of {', '.join(GUARANTEES)}")
    eos = guarantee == EXACTLY_ONCE
    group = (_get(options, "producerGroup")
             or (DEFAULT_EOS_PRODUCER_GROUP if eos else DEFAULT_PRODUCER_GROUP)).strip()
    try:
        validate_group(group)
    except TopicNameError as exc:
        raise OptionError("producerGroup", group, str(exc)) from exc
    return WriterOptions(
        namesrv=namesrv_of(options),
        topic=topic,
        producer_group=group,
        send_batch_size=_int(options, "sendBatchSize", None)
        or (DEFAULT_EOS_SEND_BATCH if eos else DEFAULT_SEND_BATCH),
        query_id=(_get(options, "queryId") or "").strip() or None,
        batch_id=_int(options, "batchId", 0, minimum=0) or 0,
        guarantee=guarantee,
    )


def describe(options: ReaderOptions) -> str:
    return json.dumps(
        {"namesrv": options.namesrv, "topics": list(options.topics), "group": options.group}
    )


__all__ = [
    "EARLIEST",
    "LATEST",
    "Position",
    "ReaderOptions",
    "StartKind",
    "WriterOptions",
    "reader_options",
    "writer_options",
]
