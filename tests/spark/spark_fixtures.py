"""Fixtures of the Spark suites that start their own broker (`server`): one local[2] session
per module, and an admin client of that broker. A suite imports them by name
(`from spark_fixtures import admin as admin, spark as spark`)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

import ferrymq.spark
from ferrymq import AdminClient
from ferrymq.embedded.standalone import StandaloneProcess as Standalone


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    from pyspark.sql import SparkSession

    session = (
        SparkSession.builder.master("local[2]")
        .appName("ferrymq-tests")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    ferrymq.spark.register(session)
    try:
        yield session
    finally:
        session.stop()


@pytest.fixture(scope="module")
def admin(server: Standalone) -> Iterator[AdminClient]:
    with AdminClient(server.namesrv) as client:
        yield client
