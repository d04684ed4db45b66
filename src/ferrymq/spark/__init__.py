"""ferrymq for Spark Structured Streaming: a PySpark Python Data Source named `ferrymq`.

    import ferrymq.spark                       # sets PYSPARK_PYTHON, SPARK_LOCAL_IP, temp dirs
    spark = SparkSession.builder.master("local[2]").getOrCreate()
    ferrymq.spark.register(spark)              # the data source and the group-commit listener

    df = (spark.readStream.format("ferrymq")
          .option("namesrv", "127.0.0.1:9876").option("topic", "orders")
          .option("group", "orders-pipeline").load())

Every option, beside its Kafka equivalent, is in docs/spark.md; an option the reader or
writer does not take is refused (UnknownOptionError). Batch writes need `.mode("append")`:
Spark refuses its default mode for every Python data source before the source is asked.
The row schema is documented in `ferrymq.spark.schema`; the sink's guarantee in
`ferrymq.spark.writer` (at-least-once with deterministic UNIQ_KEYs)."""

from __future__ import annotations

from typing import Any

from .env import prepare_environment

prepare_environment()

from .errors import (  # noqa: E402
    DataLossError,
    FerryMQSparkError,
    OffsetFormatError,
    OptionError,
    SaveModeError,
    UnknownOptionError,
)
from .listener import GroupCommitListener  # noqa: E402
from .schema import ARROW_SCHEMA, SPARK_SCHEMA  # noqa: E402
from .source import NAME, FerryMQDataSource  # noqa: E402

_listeners: dict[int, GroupCommitListener] = {}


def register(spark: Any) -> GroupCommitListener:
    """Register the `ferrymq` data source on `spark` and install the listener that commits
    each completed micro-batch's offsets for the query's group (once per session)."""
    spark.dataSource.register(FerryMQDataSource)
    key = id(spark)
    listener = _listeners.get(key)
    if listener is None:
        listener = _listeners[key] = GroupCommitListener()
        spark.streams.addListener(listener)
    return listener


def wait_committed(query: Any, timeout: float = 30.0) -> bool:
    """After `query` stopped: wait until the listener has committed its last batch. False if
    no listener was installed by register() or the deadline passed."""
    query_id = str(query.id)
    return any(listener.wait_terminated(query_id, timeout) for listener in _listeners.values())


__all__ = [
    "ARROW_SCHEMA",
    "NAME",
    "SPARK_SCHEMA",
    "DataLossError",
    "FerryMQDataSource",
    "FerryMQSparkError",
    "GroupCommitListener",
    "OffsetFormatError",
    "OptionError",
    "SaveModeError",
    "UnknownOptionError",
    "register",
    "wait_committed",
]
