"""The `ferrymq` data source: one class Spark instantiates per query with the user's options.

Constructors here only parse options (Spark builds data sources and readers in planning
workers and pickles them); every connection is opened on first use.

Every Python worker Spark starts for a query (the planners that make the source and ask it
for a reader or writer, the tasks that read and write) imports this module to unpickle what
it is given. The reader's and the writer's modules are therefore imported by the methods
that make a reader or a writer: a reading worker loads neither the producer nor the
transaction client, a writing one not the reader's modules, the one that only asks the
source for its schema none of them."""

from __future__ import annotations

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
)
from pyspark.sql.types import StructType

from .errors import SaveModeError
from .options import include_headers, reader_options, writer_options
from .schema import spark_schema

NAME = "ferrymq"


class FerryMQDataSource(DataSource):  # type: ignore[misc]
    """`spark.readStream/read/writeStream/write.format("ferrymq")`."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> StructType:
        return spark_schema(include_headers(self.options))

    def reader(self, schema: StructType) -> DataSourceReader:
        from .batch import FerryMQBatchReader

        return FerryMQBatchReader(reader_options(self.options, streaming=False))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        from .stream import FerryMQStreamReader

        return FerryMQStreamReader(reader_options(self.options, streaming=True))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        # Spark itself refuses the modes "ignore" and "errorifexists" (the default) before it
        # asks a Python data source for a writer: only "append" and "overwrite" come here.
        if overwrite:
            raise SaveModeError("overwrite")
        from .writer import FerryMQBatchWriter, check_schema

        options = writer_options(self.options)
        check_schema(schema, options)
        if options.exactly_once:
            from .exactly_once import ExactlyOnceBatchWriter

            return ExactlyOnceBatchWriter(options)
        return FerryMQBatchWriter(options)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        # `overwrite` is the complete output mode: each micro-batch's rows are sent, as Kafka's
        # sink does; a topic has nothing to truncate.
        from .writer import FerryMQStreamWriter, check_schema

        options = writer_options(self.options, streaming=True)
        check_schema(schema, options)
        if options.exactly_once:
            from .exactly_once import ExactlyOnceStreamWriter

            return ExactlyOnceStreamWriter(options)
        return FerryMQStreamWriter(options)
