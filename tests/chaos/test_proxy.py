"""TcpProxy over real loopback sockets: forwards both ways, cut() breaks open connections and
refuses new ones, heal() serves again on the same port."""

from __future__ import annotations

import socket
import socketserver
import threading
from collections.abc import Iterator

import pytest
from proxy import TcpProxy

from waits import wait_until


class Echo(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        while data := self.request.recv(65536):
            self.request.sendall(data)


@pytest.fixture
def echo() -> Iterator[str]:
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Echo)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def connect(addr: str) -> socket.socket:
    host, port = addr.rsplit(":", 1)
    s = socket.create_connection((host, int(port)), timeout=5)
    return s


def roundtrip(s: socket.socket, payload: bytes) -> bytes:
    s.sendall(payload)
    got = b""
    while len(got) < len(payload):
        chunk = s.recv(65536)
        if not chunk:
            break
        got += chunk
    return got


def broken(s: socket.socket) -> bool:
    """True once the connection reads EOF or a reset."""
    try:
        return s.recv(1) == b""
    except OSError:
        return True


def test_forwards_cuts_refuses_and_heals_on_the_same_port(echo: str) -> None:
    with TcpProxy(echo) as proxy:
        a = connect(proxy.addr)
        big = bytes(range(256)) * 4096  # 1 MiB, both directions
        assert roundtrip(a, big) == big
        # The proxy counts a chunk after passing it on, so the echo can be back first.
        wait_until(lambda: proxy.bytes_forwarded >= 2 * len(big), 5, "the proxy to count both directions")
        assert proxy.accepted == 1 and proxy.bytes_forwarded == 2 * len(big)

        proxy.cut()
        assert proxy.is_cut and proxy.open_connections() == 0
        assert broken(a)
        with pytest.raises(ConnectionRefusedError):
            connect(proxy.addr)

        addr = proxy.addr
        proxy.heal()
        assert proxy.addr == addr and not proxy.is_cut
        b = connect(proxy.addr)
        assert roundtrip(b, b"again") == b"again"
        assert proxy.accepted == 2 and proxy.cuts == 1
        a.close()
        b.close()


def test_a_target_that_refuses_closes_the_client(echo: str) -> None:
    # Bound but not listening: connections to it are refused, and no other process can take
    # the port meanwhile.
    dead = socket.socket()
    dead.bind(("127.0.0.1", 0))
    port = dead.getsockname()[1]
    try:
        with TcpProxy(f"127.0.0.1:{port}") as proxy:
            try:
                s = connect(proxy.addr)
            except OSError:
                pass  # the reset came before connect() returned: refused all the same
            else:
                assert broken(s)
            assert proxy.accepted == 0
    finally:
        dead.close()


def test_the_target_is_asked_at_every_connection(echo: str) -> None:
    targets = ["127.0.0.1:1", echo]
    with TcpProxy(lambda: targets[-1]) as proxy:
        s = connect(proxy.addr)
        assert roundtrip(s, b"x") == b"x"
        s.close()
        wait_until(lambda: not proxy.open_connections(), 5, "the proxy to close its connections")
        assert proxy.open_connections() == 0
