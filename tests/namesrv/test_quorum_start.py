"""Quorum-mode settings an operator gets wrong, refused at start with what to fix rather than a
name server that runs without a working controller and says so nowhere. No etcd is needed: each
case is refused before the name server's port opens."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from ferrymq.cli.main import main
from ferrymq.namesrv import NameServer, NamesrvConfig, NamesrvConfigError


def _closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def test_etcd_endpoints_without_a_controller_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(NamesrvConfigError, match="needs --enable-controller") as info:
        NameServer(NamesrvConfig(port=0, controller_etcd="http://127.0.0.1:2379"))
    assert info.value.key == "--controller-etcd"
    with pytest.raises(NamesrvConfigError, match="needs --controller-etcd"):
        NameServer(NamesrvConfig(port=0, enable_controller=True, controller_etcd_lease_s=5))
    with pytest.raises(NamesrvConfigError, match="only http:// client URLs"):
        NameServer(NamesrvConfig(port=0, enable_controller=True, controller_etcd="https://127.0.0.1:2379"))
    # The command says it and exits 1 before listening (it used to run without a controller).
    assert main(["namesrv", "--port", "0", "--controller-etcd", "http://127.0.0.1:2379"]) == 1
    assert "--controller-etcd: needs --enable-controller" in capsys.readouterr().err
    # So are the single controller's flags, which it ignored as well.
    assert main(["namesrv", "--port", "0", "--controller-lease-ms", "1000"]) == 1
    assert "--controller-lease-ms: needs --enable-controller" in capsys.readouterr().err


async def test_unreachable_etcd_stops_the_start_naming_the_endpoints(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{_closed_port()}"
    server = NameServer(NamesrvConfig(port=0, enable_controller=True, controller_dir=tmp_path,
                                      controller_etcd=url))
    try:
        with pytest.raises(NamesrvConfigError) as info:
            await server.start()
        text = str(info.value)
        assert url in text and "check that etcd runs" in text and "--advertise-client-urls" in text
        assert server.address == ""  # the port never opened
    finally:
        await server.stop()
