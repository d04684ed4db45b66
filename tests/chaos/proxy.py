"""A TCP proxy on loopback that a test puts between two processes (a slave and its master's HA
port) to partition them: `cut()` resets every open connection and stops listening, so new
connections are refused; `heal()` listens again on the same port. Real sockets, one thread per
direction of each connection."""

from __future__ import annotations

import contextlib
import select
import socket
import struct
import threading
from collections.abc import Callable


def _split(addr: str) -> tuple[str, int]:
    host, port = addr.rsplit(":", 1)
    return host, int(port)


def _reset(sock: socket.socket) -> None:
    # Linger 0: close sends RST, the peer sees a broken connection at once (no FIN handshake
    # a frozen peer would have to answer).
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    sock.close()


class TcpProxy:
    """Forwards connections on `addr` to `target` (an address, or a function asked at every
    connection, so the target may move; it may also be set at any time)."""

    def __init__(self, target: str | Callable[[], str], host: str = "127.0.0.1", port: int = 0) -> None:
        self.target = target
        self._host = host
        self._port = port
        self._lock = threading.Lock()
        self._conns: set[socket.socket] = set()
        self._listener: socket.socket | None = None
        self._stop = threading.Event()
        self._accept_thread: threading.Thread | None = None
        self.accepted = 0
        self.bytes_forwarded = 0
        self.cuts = 0

    @property
    def addr(self) -> str:
        return f"{self._host}:{self._port}"

    @property
    def is_cut(self) -> bool:
        return self._listener is None

    def start(self) -> TcpProxy:
        self._listen()
        return self

    def _listen(self) -> None:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self._host, self._port))
        sock.listen(64)
        self._port = sock.getsockname()[1]
        self._stop = threading.Event()
        self._listener = sock
        self._accept_thread = threading.Thread(target=self._accept_loop, args=(sock, self._stop),
                                               name=f"proxy-{self._port}", daemon=True)
        self._accept_thread.start()

    def _accept_loop(self, listener: socket.socket, stop: threading.Event) -> None:
        while not stop.is_set():
            # A short select so cut() never waits on a blocked accept().
            ready, _, _ = select.select([listener], [], [], 0.05)
            if not ready or stop.is_set():
                continue
            try:
                client, _ = listener.accept()
            except OSError:
                continue
            self._open(client)

    def _open(self, client: socket.socket) -> None:
        try:
            target = self.target() if callable(self.target) else self.target
            upstream = socket.create_connection(_split(target), timeout=2.0)
        except Exception:  # no target yet, or it refuses: the client sees a closed connection
            _reset(client)
            return
        upstream.settimeout(None)
        for s in (client, upstream):
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with self._lock:
            if self._listener is None:  # cut while connecting
                _reset(client)
                _reset(upstream)
                return
            self._conns.update((client, upstream))
            self.accepted += 1
        for src, dst in ((client, upstream), (upstream, client)):
            threading.Thread(target=self._pump, args=(src, dst), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                dst.sendall(data)
                with self._lock:
                    self.bytes_forwarded += len(data)
        except OSError:
            pass
        finally:
            with self._lock:
                self._conns.discard(src)
                self._conns.discard(dst)
            _reset(src)
            _reset(dst)

    def cut(self) -> None:
        """Partition: reset every open connection and refuse new ones until heal()."""
        self.cuts += 1
        self._drop()

    def _drop(self) -> None:
        with self._lock:
            listener, self._listener = self._listener, None
            conns, self._conns = set(self._conns), set()
        self._stop.set()
        if self._accept_thread is not None:
            self._accept_thread.join(5)
        if listener is not None:
            listener.close()
        for s in conns:
            _reset(s)

    def heal(self) -> None:
        if self._listener is None:
            self._listen()

    def open_connections(self) -> int:
        with self._lock:
            return len(self._conns) // 2

    def close(self) -> None:
        self._drop()

    def __enter__(self) -> TcpProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()
