"""The process environment Spark needs on a developer machine, set on `import ferrymq.spark`
(before the user builds a SparkSession, so the JVM inherits it). Only unset variables are
set: a user's own configuration always wins.

- PYSPARK_PYTHON / PYSPARK_DRIVER_PYTHON: this interpreter, so Python workers import the
  same ferrymq and pyarrow as the driver (otherwise Spark picks `python3` from PATH).
- SPARK_LOCAL_IP=127.0.0.1: Spark otherwise resolves the host name, which on many machines
  points at an address that is not up, and warns or fails.
- spark.local.dir and java.io.tmpdir in a ferrymq temp folder, one sub-folder per driver
  process: a driver killed with -9 leaves its files behind, and they are removed by the next
  driver that starts (a folder whose process is gone)."""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import sys
import tempfile
from pathlib import Path

TMP_ENV = "FERRYMQ_SPARK_TMPDIR"
_PREFIX = "driver-"


def temp_root() -> Path:
    base = os.environ.get(TMP_ENV)
    if base:
        return Path(base)
    return Path(tempfile.gettempdir()) / f"ferrymq-spark-{os.getuid()}"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def clean_stale(root: Path) -> None:
    """Remove the folders of driver processes that no longer exist."""
    if not root.is_dir():
        return
    for child in root.iterdir():
        if not child.name.startswith(_PREFIX):
            continue
        try:
            pid = int(child.name[len(_PREFIX) :])
        except ValueError:
            continue
        if pid != os.getpid() and not _alive(pid):
            shutil.rmtree(child, ignore_errors=True)


def in_spark_worker() -> bool:
    """Python workers started by Spark inherit the driver's settings; they set nothing."""
    return "PYTHON_WORKER_FACTORY_SECRET" in os.environ


def prepare_environment() -> Path | None:
    """Set the variables (once per process); returns this driver's temp folder."""
    if in_spark_worker():
        return None
    root = temp_root()
    mine = root / f"{_PREFIX}{os.getpid()}"
    if os.environ.get("FERRYMQ_SPARK_PREPARED") == str(mine):
        return mine
    with contextlib.suppress(OSError):
        clean_stale(root)
    mine.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("SPARK_LOCAL_DIRS", str(mine))
    os.environ.setdefault(
        "PYSPARK_SUBMIT_ARGS",
        # spark.local.dir comes from SPARK_LOCAL_DIRS (setting both makes Spark warn).
        f"--conf spark.ui.enabled=false --driver-java-options -Djava.io.tmpdir={mine}"
        " pyspark-shell",
    )
    os.environ["FERRYMQ_SPARK_PREPARED"] = str(mine)
    atexit.register(shutil.rmtree, mine, True)
    return mine
