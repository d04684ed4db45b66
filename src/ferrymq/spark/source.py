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
from .options import reader_options, writer_options
from .schema import SPARK_SCHEMA
from .stream import FerryMQStreamReader
from .writer import FerryMQBatchWriter, FerryMQStreamWriter, check_schema

NAME = "ferrymq"


class FerryMQDataSource(DataSource):  # type: ignore[misc]
    """`spark.readStream/read/writeStream/write.format("ferrymq")`."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> StructType:
        return SPARK_SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        return FerryMQBatchReader(reader_options(self.options, streaming=False))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return FerryMQStreamReader(reader_options(self.options, streaming=True))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        options = writer_options(self.options)
        check_schema(schema, options)
        return FerryMQBatchWriter(options)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        options = writer_options(self.options)
        check_schema(schema, options)
        return FerryMQStreamWriter(options)
