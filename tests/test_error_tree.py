"""Every exception ferrymq defines has one root, FerryMQError, so a caller can catch ferrymq's
errors in one clause and ask any of them whether a retry may succeed."""

from __future__ import annotations

import errno
import importlib
import importlib.util
import inspect
import pkgutil
import warnings
from pathlib import Path

import ferrymq
from ferrymq.broker.config import ConfigError
from ferrymq.common.errors import FerryMQError
from ferrymq.common.headers import HeaderError
from ferrymq.embedded.process import ServerNotReadyError
from ferrymq.namesrv.controller import ControllerError, ControllerStateError
from ferrymq.remoting.tls import TlsConfigError
from ferrymq.store.config import StoreConfigError
from ferrymq.store.errors import StoreCorruptionError, StoreError, StoreSpaceError

# Internal signals that never leave the module that raises them: the Cython header decoder's
# "let the Python decoder judge this input".
INTERNAL_SIGNALS = {"ferrymq.remoting._cheader._Fallback"}
# Modules that need an optional dependency, by the dependency's top-level name.
OPTIONAL_DEPS = {"pyspark", "pyarrow", "grpc", "google"}


def _walk() -> tuple[list[str], list[type[BaseException]]]:
    """Import every ferrymq module; returns the modules checked and the exceptions they define."""
    checked: list[str] = []
    defined: list[type[BaseException]] = []
    skipped: list[str] = []
    for info in pkgutil.walk_packages(ferrymq.__path__, "ferrymq."):
        if info.name.rsplit(".", 1)[-1] == "__main__":
            continue  # runs the command line when imported
        try:
            module = importlib.import_module(info.name)
        except ModuleNotFoundError as exc:
            top = (exc.name or "").split(".")[0]
            assert top in OPTIONAL_DEPS and importlib.util.find_spec(top) is None, (info.name, exc)
            skipped.append(f"{info.name} (needs {top})")
            continue
        checked.append(info.name)
        for value in vars(module).values():
            if inspect.isclass(value) and issubclass(value, BaseException) and value.__module__ == info.name:
                defined.append(value)
    if skipped:
        warnings.warn(f"not checked, optional dependency missing: {', '.join(skipped)}", stacklevel=2)
    return checked, defined


def test_every_exception_derives_from_ferrymq_error() -> None:
    checked, defined = _walk()
    for dep, module in (("pyspark", "ferrymq.spark.source"), ("grpc", "ferrymq.grpc.service")):
        if importlib.util.find_spec(dep) is not None:
            assert module in checked
    names = {f"{cls.__module__}.{cls.__qualname__}" for cls in defined}
    assert names >= INTERNAL_SIGNALS  # the exemption names something that still exists
    outside = sorted(
        name for cls, name in ((c, f"{c.__module__}.{c.__qualname__}") for c in defined)
        if not issubclass(cls, FerryMQError) and name not in INTERNAL_SIGNALS
    )
    assert outside == []
    assert len(names) > 60  # the walk found the package's modules, not an empty path


def test_builtin_bases_are_kept_for_callers_that_catch_them() -> None:
    for cls in (ConfigError, StoreConfigError, TlsConfigError, HeaderError):
        assert issubclass(cls, ValueError)
    assert issubclass(ServerNotReadyError, RuntimeError)
    full = StoreSpaceError(Path("/data/commitlog/00000000000000000000"), 1024, "commit log file",
                           OSError(errno.ENOSPC, "No space left on device"))
    assert isinstance(full, OSError) and isinstance(full, FerryMQError)
    assert full.errno == errno.ENOSPC and full.needed == 1024


def test_retriable_says_whether_trying_again_may_succeed() -> None:
    # A full disk frees up (files expire); a producer retries it as RocketMQ's does the
    # SERVICE_NOT_AVAILABLE its broker answers.
    assert StoreSpaceError.retriable
    for cls in (StoreError, StoreCorruptionError, ConfigError, StoreConfigError, TlsConfigError,
                ControllerError, ControllerStateError, ServerNotReadyError, HeaderError):
        assert not cls.retriable, cls
