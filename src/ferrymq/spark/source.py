"""The `ferrymq` data source: one class Spark instantiates per query with the user's options.

Constructors here only parse options (Spark builds data sources and readers in planning
workers and pickles them); every connection is opened on first use."""

from __future__ import annotations

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
)
from pyspark.sql.types import StructType

from .batch import FerryMQBatchReader
from .errors import SaveModeError
from .exactly_once import ExactlyOnceBatchWriter, ExactlyOnceStreamWriter
from .options import include_headers, reader_options, writer_options
from .schema import spark_schema
from .stream import FerryMQStreamReader
from .writer import FerryMQBatchWriter, FerryMQStreamWriter, check_schema

NAME = "ferrymq"


class FerryMQDataSource(DataSource):  # type: ignore[misc]
    """`spark.readStream/read/writeStream/write.format("ferrymq")`."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> StructType:
        return spark_schema(include_headers(self.options))

    def reader(self, schema: StructType) -> DataSourceReader:
        return FerryMQBatchReader(reader_options(self.options, streaming=False))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return FerryMQStreamReader(reader_options(self.options, streaming=True))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        # Spark itself refuses the modes "ignore" and "errorifexists" (the default) before it
        # asks a Python data source for a writer: only "append" and "overwrite" come here.
        if overwrite:
            raise SaveModeError("overwrite")
        options = writer_options(self.options)
        check_schema(schema, options)
        return ExactlyOnceBatchWriter(options) if options.exactly_once else FerryMQBatchWriter(options)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        # `overwrite` is the complete output mode: each micro-batch's rows are sent, as Kafka's
        # sink does; a topic has nothing to truncate.
        options = writer_options(self.options, streaming=True)
        check_schema(schema, options)
        if options.exactly_once:
            return ExactlyOnceStreamWriter(options)
        return FerryMQStreamWriter(options)
