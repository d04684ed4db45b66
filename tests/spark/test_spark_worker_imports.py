"""What a PySpark Python worker loads to unpickle the source, its readers and its writers.

Spark starts many Python workers for a query (the planners that make the source and ask it for
a reader or writer, the tasks that read and write), and each imports the package. Every one of
them used to load all of it: the admin and transaction clients, the producer, the reader's and
the writer's modules, Arrow's compute functions (about 0.5 s of CPU each without cached
bytecode). Each now loads what its side needs. Fresh interpreters, as the workers are."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

# What each step must not have loaded: modules of another side, or of no planner at all.
_STEPS = """
import json, sys
import pyspark.worker  # what every worker has loaded before it unpickles anything
from pyspark.sql.types import BinaryType, StructField, StructType
from ferrymq.spark.source import FerryMQDataSource
loaded = {}
source = FerryMQDataSource({"namesrv": "127.0.0.1:9876", "topic": "t"})
source.schema()
loaded["schema"] = sorted(sys.modules)
if sys.argv[1] == "read":
    source.streamReader(source.schema())
else:
    source.writer(StructType([StructField("body", BinaryType())]), False)
loaded[sys.argv[1]] = sorted(sys.modules)
print(json.dumps(loaded))
"""

CLIENT = ("ferrymq.client.api", "ferrymq.client.admin", "ferrymq.remoting", "ferrymq.client.producer",
          "ferrymq.client.transaction")
READER = ("ferrymq.spark.stream", "ferrymq.spark.batch", "ferrymq.spark.read", "ferrymq.spark.cluster",
          "ferrymq.spark.decode")
WRITER = ("ferrymq.spark.writer", "ferrymq.spark.exactly_once", "ferrymq.spark.sink_encode")


def _loaded(side: str) -> dict[str, set[str]]:
    proc = subprocess.run([sys.executable, "-c", _STEPS, side], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return {step: set(modules) for step, modules in json.loads(proc.stdout).items()}


def test_each_worker_loads_its_side_only() -> None:
    read = _loaded("read")
    assert not read["schema"] & {*CLIENT, *READER, *WRITER, "pyarrow.compute"}, "asked only for the schema"
    assert {"ferrymq.spark.stream", "ferrymq.client.admin"} <= read["read"], "the reader's own modules"
    assert not read["read"] & {*WRITER, "ferrymq.client.producer", "ferrymq.client.transaction"}
    write = _loaded("write")["write"]
    assert {"ferrymq.spark.writer", "ferrymq.client.producer"} <= write, "the writer's own modules"
    assert not write & {*READER, "ferrymq.client.admin", "ferrymq.client.transaction", "ferrymq.spark.exactly_once"}
