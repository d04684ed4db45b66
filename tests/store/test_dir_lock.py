"""One store directory, one owner: a second store, broker or controller on a directory in use
is refused with an error naming the directory and the holder's pid, the owner's data is left
as it was, and a SIGKILLed owner leaves no stale lock."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from store_util import msg, open_store, queue_bodies, small_config

from ferrymq import AdminClient, Message, Producer
from ferrymq.common.dirlock import DirectoryLock, DirectoryLockedError
from ferrymq.embedded.process import ServerNotReadyError, ServerProcess
from ferrymq.store import MessageStore
from ferrymq.store.errors import StoreLayoutError


def test_a_second_store_on_a_directory_in_use_is_refused(tmp_path: Path) -> None:
    first = open_store(tmp_path / "s")
    try:
        first.put_messages([msg("T", 0, b"kept")])
        second = MessageStore(small_config(tmp_path / "s"))
        with pytest.raises(DirectoryLockedError) as info:
            second.start()
        assert info.value.directory == tmp_path / "s"
        assert info.value.holder_pid == os.getpid()
        assert str(tmp_path / "s") in str(info.value) and str(os.getpid()) in str(info.value)
        first.put_messages([msg("T", 0, b"after")])  # the owner goes on
        assert queue_bodies(first) == [b"kept", b"after"]
    finally:
        first.shutdown()
    again = open_store(tmp_path / "s")  # released by the shutdown
    try:
        assert queue_bodies(again) == [b"kept", b"after"]
    finally:
        again.shutdown()


def test_a_failed_start_releases_the_directory(tmp_path: Path) -> None:
    root = tmp_path / "s"
    (root / "commitlog").mkdir(parents=True)
    (root / "commitlog" / f"{7:020d}").write_bytes(b"x")  # no segment starts at 7
    with pytest.raises(StoreLayoutError):
        open_store(root)
    lock = DirectoryLock(root)
    lock.acquire()  # not held by the failed start
    lock.release()


def test_the_lock_names_nobody_once_released(tmp_path: Path) -> None:
    lock = DirectoryLock(tmp_path, "controller")
    with lock:
        assert (tmp_path / "lock").read_text().strip() == str(os.getpid())
        with pytest.raises(DirectoryLockedError, match="controller directory"):
            DirectoryLock(tmp_path, "controller").acquire()
    assert (tmp_path / "lock").read_text() == ""
    with DirectoryLock(tmp_path):
        pass


def _standalone(tmp_path: Path, store: Path, name: str) -> ServerProcess:
    return ServerProcess(name, lambda: ["standalone", "--store-dir", str(store), "--broker-port", "0",
                                        "--namesrv-port", "0", "--grpc-port", "-1"],
                         tmp_path / f"{name}.log", "namesrv", timeout=60)


def test_a_second_broker_process_on_one_store_exits_and_loses_nothing(tmp_path: Path) -> None:
    store = tmp_path / "store"
    first = _standalone(tmp_path, store, "first")
    ready = first.start()
    try:
        producer = Producer("lock-test", namesrv=ready["namesrv"])
        producer.start()
        try:
            sent = [producer.send(Message("locked", b"m%d" % i)).msg_id for i in range(20)]
            second = subprocess.run(
                [sys.executable, "-m", "ferrymq", "broker", "--store-dir", str(store),
                 "--namesrv", ready["namesrv"], "--broker-port", "0", "--grpc-port", "-1"],
                capture_output=True, text=True, timeout=60)
            assert second.returncode == 1
            assert str(store) in second.stderr and f"process {first.pid}" in second.stderr
            assert "Traceback" not in second.stderr
            sent += [producer.send(Message("locked", b"n%d" % i)).msg_id for i in range(20)]
        finally:
            producer.shutdown()
        assert first.running
        pid = first.pid
        assert pid is not None
        os.kill(pid, signal.SIGKILL)  # the kernel drops the lock with the process
        again = _standalone(tmp_path, store, "again")
        try:
            ns = again.start()["namesrv"]
        except ServerNotReadyError as exc:
            pytest.fail(f"restart on the killed broker's store failed: {exc}")
        try:
            with AdminClient(ns) as admin:
                stored = sum(q.max_offset - q.min_offset for q in admin.topic_status("locked"))
        finally:
            again.stop()
    finally:
        first.kill()
    assert len(set(sent)) == 40 and stored == 40
