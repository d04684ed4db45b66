"""The row schema of the `ferrymq` source, as a Spark StructType and as the exact Arrow schema
Spark expects from `read()`.

| column          | Spark type          | meaning                                                  |
|-----------------|---------------------|----------------------------------------------------------|
| topic           | string              | the topic the record is stored under (%RETRY%/%DLQ% too) |
| broker          | string              | broker name                                              |
| queue_id        | int                 | queue within the topic on that broker                    |
| queue_offset    | long                | position in the queue                                    |
| msg_id          | string              | the producer's unique id (UNIQ_KEY), else the offset id  |
| keys            | string (nullable)   | KEYS property, space separated as RocketMQ sends them    |
| tags            | string (nullable)   | TAGS property                                            |
| body            | binary              | message body, decompressed                               |
| properties      | map<string,string>  | every property, system ones included                     |
| born_timestamp  | timestamp           | when the producer created the message                    |
| store_timestamp | timestamp           | when the broker stored it                                |
| reconsume_times | int                 | delivery attempts so far (retry and DLQ topics)          |

With the option includeHeaders=true, a last column `headers`, Kafka's
array<struct<key:string,value:binary>>: the same properties in Kafka's header shape (values
UTF-8 encoded), null for a message without any.

Spark checks a yielded RecordBatch's schema for equality with
`to_arrow_schema(schema, timezone="UTC")`, so ARROW_SCHEMA is written to be that, field
nullability and map entry names included (a unit test holds the two equal).

Every Spark worker that unpickles the source imports this module, the one that only asks
for the schema too: batches are built in `decode`, which alone loads Arrow's compute
functions."""

from __future__ import annotations

import pyarrow as pa
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

COLUMNS = (
    "topic",
    "broker",
    "queue_id",
    "queue_offset",
    "msg_id",
    "keys",
    "tags",
    "body",
    "properties",
    "born_timestamp",
    "store_timestamp",
    "reconsume_times",
)

SPARK_SCHEMA = StructType(
    [
        StructField("topic", StringType(), False),
        StructField("broker", StringType(), False),
        StructField("queue_id", IntegerType(), False),
        StructField("queue_offset", LongType(), False),
        StructField("msg_id", StringType(), False),
        StructField("keys", StringType(), True),
        StructField("tags", StringType(), True),
        StructField("body", BinaryType(), False),
        StructField("properties", MapType(StringType(), StringType(), True), False),
        StructField("born_timestamp", TimestampType(), False),
        StructField("store_timestamp", TimestampType(), False),
        StructField("reconsume_times", IntegerType(), False),
    ]
)

TIMESTAMP = pa.timestamp("us", tz="UTC")
PROPERTIES = pa.map_(pa.string(), pa.string())

ARROW_SCHEMA = pa.schema(
    [
        pa.field("topic", pa.string(), False),
        pa.field("broker", pa.string(), False),
        pa.field("queue_id", pa.int32(), False),
        pa.field("queue_offset", pa.int64(), False),
        pa.field("msg_id", pa.string(), False),
        pa.field("keys", pa.string(), True),
        pa.field("tags", pa.string(), True),
        pa.field("body", pa.binary(), False),
        pa.field("properties", PROPERTIES, False),
        pa.field("born_timestamp", TIMESTAMP, False),
        pa.field("store_timestamp", TIMESTAMP, False),
        pa.field("reconsume_times", pa.int32(), False),
    ]
)

# Kafka's `headers` column (includeHeaders=true), last as in Kafka's source; Kafka gives null,
# not an empty array, for a record without headers.
HEADER = StructType([StructField("key", StringType(), True), StructField("value", BinaryType(), True)])
HEADERS_FIELD = StructField("headers", ArrayType(HEADER, True), True)
ARROW_HEADER = pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())])
ARROW_HEADERS_FIELD = pa.field("headers", pa.list_(pa.field("element", ARROW_HEADER)), True)
SPARK_SCHEMA_WITH_HEADERS = StructType([*SPARK_SCHEMA.fields, HEADERS_FIELD])
ARROW_SCHEMA_WITH_HEADERS = ARROW_SCHEMA.append(ARROW_HEADERS_FIELD)


def spark_schema(include_headers: bool) -> StructType:
    return SPARK_SCHEMA_WITH_HEADERS if include_headers else SPARK_SCHEMA


# What the writer accepts: `body` is required (binary or string); the rest are optional.
WRITER_REQUIRED = ("body",)
WRITER_OPTIONAL = ("topic", "keys", "tags", "properties")
