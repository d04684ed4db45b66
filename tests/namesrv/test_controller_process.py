"""`ferrymq namesrv --enable-controller` as a real process: two fake replicas heartbeat over TCP,
the master goes silent and the other replica is told it is master at epoch 2 within lease +
scan; after a SIGKILL the name server restarted on the same directory still says epoch 2."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ferrymq.common import jsonx
from ferrymq.common.codes import RequestCode, ResponseCode
from ferrymq.remoting import RemotingClient, RemotingCommand

LEASE_MS = 1000
SCAN_MS = 200
BEAT_S = 0.1


@contextlib.contextmanager
def namesrv(state_dir: Path, timeout: float = 30.0) -> Iterator[tuple[subprocess.Popen[str], str]]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "ferrymq", "namesrv", "--port", "0", "--enable-controller",
         "--controller-dir", str(state_dir), "--controller-lease-ms", str(LEASE_MS),
         "--controller-scan-interval-ms", str(SCAN_MS)],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=dict(os.environ, PYTHONUNBUFFERED="1"),
    )
    ready: list[str] = []

    def read_ready() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.startswith("namesrv="):
                ready.append(line.strip().split("=", 1)[1])
                break

    reader = threading.Thread(target=read_ready, daemon=True)
    reader.start()
    reader.join(timeout)
    try:
        assert ready, "name server did not print its ready line"
        yield proc, ready[0]
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


def beat(broker_id: int, max_offset: int, epoch: int) -> dict[str, Any]:
    return {"clusterName": "C", "brokerName": "b", "brokerId": broker_id,
            "brokerAddr": f"127.0.0.1:{10910 + broker_id}", "haAddr": f"127.0.0.1:{20910 + broker_id}",
            "maxOffset": max_offset, "epoch": epoch}


async def call(client: RemotingClient, ns: str, code: int, body: dict[str, Any]) -> dict[str, Any]:
    resp = await client.invoke(ns, RemotingCommand.request(code, body=jsonx.dumps_bytes(body)), 3.0)
    assert resp.code == ResponseCode.SUCCESS, (resp.code, resp.remark)
    doc: dict[str, Any] = json.loads(resp.body or b"")
    return doc


@pytest.mark.timeout(120)
async def test_failover_and_restart_of_a_real_controller(tmp_path: Path) -> None:
    state_dir = tmp_path / "ctl"
    client = RemotingClient()
    try:
        with namesrv(state_dir) as (proc, ns):
            first = await call(client, ns, RequestCode.BROKER_HEARTBEAT, beat(1, 0, 0))
            assert (first["masterId"], first["epoch"]) == (1, 1)
            await call(client, ns, RequestCode.BROKER_HEARTBEAT, beat(2, 0, 0))
            altered = await call(client, ns, RequestCode.CONTROLLER_ALTER_SYNC_STATE_SET, {
                "brokerName": "b", "masterId": 1, "epoch": 1, "syncStateSetEpoch": 1, "syncStateSet": [1, 2]})
            assert (altered["syncStateSet"], altered["syncStateSetEpoch"]) == ([1, 2], 2)

            # Both replicas heartbeat for over a lease: nothing moves while the master is alive.
            stable_until = time.monotonic() + 2 * LEASE_MS / 1000
            while time.monotonic() < stable_until:
                # Sent before the controller received it: the lease runs from no earlier.
                master_last_sent = time.monotonic()
                one = await call(client, ns, RequestCode.BROKER_HEARTBEAT, beat(1, 100, 1))
                two = await call(client, ns, RequestCode.BROKER_HEARTBEAT, beat(2, 100, 1))
                assert one["masterId"] == two["masterId"] == 1 and two["epoch"] == 1
                await asyncio.sleep(BEAT_S)

            # The master goes silent; replica 2 keeps heartbeating until it is told it is master.
            deadline = time.monotonic() + 10.0
            while True:
                answer = await call(client, ns, RequestCode.BROKER_HEARTBEAT, beat(2, 100, 1))
                if answer["masterId"] == 2:
                    break
                assert answer["masterId"] == 1, answer
                assert time.monotonic() < deadline, "replica 2 was never elected"
                await asyncio.sleep(BEAT_S)
            took = time.monotonic() - master_last_sent
            assert answer == {"epoch": 2, "masterId": 2, "masterAddr": "127.0.0.1:10912",
                              "masterHaAddr": "127.0.0.1:20912", "syncStateSet": [2], "syncStateSetEpoch": 3,
                              "leaseMs": LEASE_MS}
            # Within lease + scan interval (+ a heartbeat round and scheduling slack).
            assert took >= LEASE_MS / 1000, took
            assert took <= (LEASE_MS + SCAN_MS) / 1000 + BEAT_S + 1.0, took

            proc.kill()
            proc.wait()
        client.close_connection(ns)

        with namesrv(state_dir) as (_, ns):
            info = await call(client, ns, RequestCode.CONTROLLER_GET_REPLICA_INFO, {"brokerName": "b"})
            assert (info["masterId"], info["epoch"], info["syncStateSet"], info["syncStateSetEpoch"]) == (2, 2, [2], 3)
            # The old master returns: it is told to follow replica 2, not given its place back.
            back = await call(client, ns, RequestCode.BROKER_HEARTBEAT, beat(1, 100, 1))
            assert (back["masterId"], back["epoch"]) == (2, 2)
    finally:
        await client.close()


def test_unreadable_state_file_stops_the_start(tmp_path: Path) -> None:
    (tmp_path / "controller.json").write_text("{torn")
    proc = subprocess.run(
        [sys.executable, "-m", "ferrymq", "namesrv", "--port", "0", "--enable-controller",
         "--controller-dir", str(tmp_path)],
        capture_output=True, text=True, timeout=60,
    )
    assert proc.returncode == 1 and "namesrv=" not in proc.stdout
    assert "cannot start: controller state" in proc.stderr and "not valid JSON" in proc.stderr


def test_a_second_controller_on_one_state_directory_is_refused(tmp_path: Path) -> None:
    with namesrv(tmp_path) as (first, _addr):
        second = subprocess.run(
            [sys.executable, "-m", "ferrymq", "namesrv", "--port", "0", "--enable-controller",
             "--controller-dir", str(tmp_path)],
            capture_output=True, text=True, timeout=60)
        assert second.returncode == 1
        assert f"controller directory {tmp_path} is in use by process {first.pid}" in second.stderr
        assert first.poll() is None
