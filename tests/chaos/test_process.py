"""ServerProcess (ferrymq.embedded) on real `ferrymq namesrv` and `ferrymq broker` processes:
ready lines, SIGKILL and restart on the same ports and store, SIGSTOP/SIGCONT, SIGTERM."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from ferrymq import AdminClient, Message, Producer
from ferrymq.common.message import MessageQueue
from ferrymq.embedded import ServerNotReadyError, ServerProcess
from ferrymq.embedded.cluster import NamesrvProcess, write_broker_toml

FAST = dict(route_refresh_interval=0.3, heartbeat_interval=1.0, send_timeout=2.0)


def plain_broker(tmp_path: Path, ns: NamesrvProcess) -> ServerProcess:
    """A broker without replication flags, restarted on the port its first run got."""
    config = write_broker_toml(tmp_path / "broker.toml", {"register_broker_interval_ms": 500})

    def argv() -> list[str]:
        port = proc.ready["broker"].rsplit(":", 1)[1] if proc.ready else "0"
        # The other ports are picked freely on every start: their defaults on a fixed broker
        # port (gRPC 8081, replication the broker port + 1) may be held by anything by then.
        return ["broker", "--namesrv", ns.addr, "--store-dir", str(tmp_path / "store"), "--broker-port", port,
                "--ha-port", "0", "--grpc-port", "0", "--config", str(config)]

    proc = ServerProcess("broker", argv, tmp_path / "logs" / "broker.log", "broker", timeout=30)
    return proc


def test_kill_restart_pause_resume_stop(tmp_path: Path) -> None:
    ns = NamesrvProcess(tmp_path, controller=False, lease_ms=3000, extra=(), timeout=30)
    broker = plain_broker(tmp_path, ns)
    try:
        ns_addr = ns.start()["namesrv"]
        addr = broker.start()["broker"]
        assert broker.running and not broker.paused and broker.starts == 1
        with AdminClient(ns_addr, timeout=1.0) as admin:
            admin.create_topic("t", 1)
            mq = MessageQueue("t", "broker-a", 0)
            with Producer("p", ns_addr, **FAST) as producer:
                sent = [producer.send(Message("t", f"m{i}".encode())) for i in range(5)]
            assert [r.queue_offset for r in sent] == list(range(5))

            broker.kill()
            assert not broker.running and broker.returncode == -signal.SIGKILL
            assert broker.restart(crash=True)["broker"] == addr  # same port, same store
            assert broker.starts == 2
            assert admin.max_offset(mq) == 5

            broker.pause()
            assert broker.paused
            with pytest.raises(Exception):  # noqa: B017 - any timeout/transport error will do
                admin.max_offset(mq)
            broker.resume()
            assert not broker.paused and admin.max_offset(mq) == 5

            # SIGTERM on a frozen process waits for SIGCONT; stop() sends it.
            broker.pause()
            assert broker.stop(15) == 0
            assert not broker.running
            ns.kill()
            assert ns.start()["namesrv"] == ns_addr
        assert "start #2" in broker.log_path.read_text()
    finally:
        broker.kill()
        ns.kill()


def test_a_process_that_cannot_start_names_itself_and_shows_its_log(tmp_path: Path) -> None:
    bad = ServerProcess("bad", lambda: ["broker", "--no-such-flag"], tmp_path / "bad.log", "broker", timeout=30)
    with pytest.raises(ServerNotReadyError) as info:
        bad.start()
    assert info.value.name == "bad" and info.value.returncode == 2
    assert "--no-such-flag" in info.value.log_tail
    assert not bad.running
