"""Resource bounds of a server against peers that misbehave, over real loopback sockets: replies
never read, frames begun and never finished, connections left idle, and no file descriptors
left to accept with. Bounds are checked on the bytes the server holds, not on timings."""

from __future__ import annotations

import asyncio
import itertools
import socket
import struct
import subprocess
import sys
import textwrap
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from ferrymq.common.codes import ResponseCode
from ferrymq.remoting import (
    Connection,
    RemotingCommand,
    RemotingServer,
    ServerConfig,
    decode_frame,
    encode_frame,
)
from waits import eventually, wait_until

ECHO, HOLD = 1, 3
UNKNOWN = 999


class Server:
    def __init__(self, config: ServerConfig, clock: Callable[[], float] | None = None) -> None:
        self.server = RemotingServer(config, **({"clock": clock} if clock else {}))
        self.release = asyncio.Event()
        self.addr = ("", 0)

    async def start(self) -> None:
        async def echo(conn: Connection, req: RemotingCommand) -> RemotingCommand:
            return RemotingCommand.make_response_to(req, ResponseCode.SUCCESS, body=req.body)

        async def hold(conn: Connection, req: RemotingCommand) -> RemotingCommand:
            await self.release.wait()
            return RemotingCommand.make_response_to(req, ResponseCode.SUCCESS)

        self.server.register(ECHO, echo)
        self.server.register(HOLD, hold)
        self.addr = await self.server.start()

    def conn_of(self, writer: asyncio.StreamWriter) -> Connection | None:
        host, port = writer.get_extra_info("sockname")[:2]
        return next((c for c in self.server.connections if c.remote_addr == f"{host}:{port}"), None)

    async def stop(self) -> None:
        self.release.set()
        await self.server.stop()


@pytest.fixture
async def make_server() -> AsyncIterator[Callable[..., object]]:
    started: list[Server] = []

    async def make(config: ServerConfig, clock: Callable[[], float] | None = None) -> Server:
        s = Server(config, clock)
        await s.start()
        started.append(s)
        return s

    yield make
    for s in started:
        await s.stop()


async def _connect(addr: tuple[str, int], rcvbuf: int | None = None) -> tuple[asyncio.StreamReader,
                                                                              asyncio.StreamWriter]:
    sock = socket.socket()
    if rcvbuf is not None:  # set before connecting, so the kernel does not grow it
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    sock.setblocking(False)
    await asyncio.get_running_loop().sock_connect(sock, addr)
    return await asyncio.open_connection(sock=sock)


async def _read_frame(reader: asyncio.StreamReader) -> RemotingCommand:
    (length,) = struct.unpack(">i", await reader.readexactly(4))
    return decode_frame(await reader.readexactly(length))


async def test_replies_never_read_do_not_grow_the_write_buffer(make_server: Callable[..., object]) -> None:
    high, low = 64 << 10, 16 << 10
    srv: Server = await make_server(ServerConfig(write_buffer_high=high, write_buffer_low=low,  # type: ignore[misc]
                                                 idle_timeout=0))
    reader, writer = await _connect(srv.addr, rcvbuf=16 << 10)
    # Unknown codes are answered directly, without a handler task: the path that used to
    # bypass every limit. About 130 bytes of reply per 90 bytes of request.
    request = encode_frame(RemotingCommand.request(UNKNOWN))
    count = 100_000
    writer.write(request * count)
    await eventually(lambda: srv.conn_of(writer) is not None, what="accepted")
    conn = srv.conn_of(writer)
    assert conn is not None
    reply_size = len(encode_frame(RemotingCommand.make_response_to(
        RemotingCommand.request(UNKNOWN), ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
        remark=f" request type {UNKNOWN} not supported")))
    bound = high + 2 * reply_size
    # Either the server stops reading (fixed) or its buffer passes the bound (unbounded).
    await eventually(lambda: conn.reading_paused or conn.write_buffer_size > bound, what="pause or growth")
    assert conn.write_buffer_size <= bound
    assert srv.server.stats().write_buffer_bytes <= bound
    # Nothing was dropped: once the peer reads, every request is answered, in order.
    for _ in range(count):
        resp = await asyncio.wait_for(_read_frame(reader), 20.0)
        assert resp.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
    writer.close()


async def test_requests_behind_a_paused_read_are_handled_once_the_peer_reads(
        make_server: Callable[..., object]) -> None:
    srv: Server = await make_server(ServerConfig(write_buffer_high=32 << 10, write_buffer_low=8 << 10,  # type: ignore[misc]
                                                 idle_timeout=0))
    reader, writer = await _connect(srv.addr, rcvbuf=16 << 10)
    bodies = [bytes([i % 256]) * 4096 for i in range(2000)]  # ~8 MiB of echoes
    for i, body in enumerate(bodies):
        req = RemotingCommand.request(ECHO, body=body)
        req.opaque = i
        writer.write(encode_frame(req))
    got = [await asyncio.wait_for(_read_frame(reader), 20.0) for _ in bodies]
    assert sorted(r.opaque for r in got) == list(range(len(bodies)))
    assert all(r.body == bodies[r.opaque] for r in got)
    writer.close()


async def test_half_sent_frames_are_bounded_by_a_server_wide_budget(make_server: Callable[..., object]) -> None:
    ticks = itertools.count()
    budget = 4 << 20
    srv: Server = await make_server(ServerConfig(partial_frame_budget=budget, idle_timeout=0),  # type: ignore[misc]
                                    clock=lambda: float(next(ticks)))
    frame = encode_frame(RemotingCommand.request(ECHO, body=b"z" * (2 << 20)))
    half = frame[: 1 << 20]
    peers = []
    for _ in range(10):
        reader, writer = await _connect(srv.addr)
        writer.write(half)
        await writer.drain()
        await eventually(lambda w=writer: (c := srv.conn_of(w)) is not None and c.partial_frame_bytes == len(half),
                    what="half frame buffered")
        peers.append((reader, writer))
        assert srv.server.stats().partial_frame_bytes <= budget
    # Four halves fit in the budget; each later one closed the connection whose frame is oldest.
    stats = srv.server.stats()
    assert stats.closed_over_partial_budget == 6
    assert stats.partial_frame_bytes == 4 * len(half)
    for reader, _ in peers[:6]:
        assert await asyncio.wait_for(reader.read(), 10.0) == b""
    reader, writer = peers[-1]
    writer.write(frame[len(half):])
    resp = await asyncio.wait_for(_read_frame(reader), 20.0)
    assert resp.code == ResponseCode.SUCCESS and resp.body == b"z" * (2 << 20)
    for _, w in peers:
        w.close()


async def test_stop_does_not_wait_forever_for_a_peer_that_never_reads(make_server: Callable[..., object]) -> None:
    srv: Server = await make_server(ServerConfig(idle_timeout=0, shutdown_grace=0.2))  # type: ignore[misc]
    _, writer = await _connect(srv.addr, rcvbuf=16 << 10)
    writer.write(encode_frame(RemotingCommand.request(UNKNOWN)) * 50_000)
    await eventually(lambda: (c := srv.conn_of(writer)) is not None and c.write_buffer_size > 0, what="unsent replies")
    await asyncio.wait_for(srv.server.stop(), 20.0)
    assert not srv.server.connections
    writer.close()


async def test_idle_connections_are_closed(make_server: Callable[..., object]) -> None:
    srv: Server = await make_server(ServerConfig(idle_timeout=0.2, idle_check_interval=0.05))  # type: ignore[misc]
    reader, writer = await _connect(srv.addr)
    assert await asyncio.wait_for(reader.read(), 10.0) == b""
    assert srv.server.stats().closed_idle == 1
    writer.close()


async def test_only_connections_idle_past_the_timeout_are_closed(make_server: Callable[..., object]) -> None:
    now = [0.0]
    srv: Server = await make_server(ServerConfig(idle_timeout=120, idle_check_interval=10_000),  # type: ignore[misc]
                                    clock=lambda: now[0])
    active_r, active_w = await _connect(srv.addr)
    idle_r, idle_w = await _connect(srv.addr)
    held_r, held_w = await _connect(srv.addr)
    held_w.write(encode_frame(RemotingCommand.request(HOLD)))
    await eventually(lambda: (c := srv.conn_of(held_w)) is not None and c.inflight == 1, what="held request")
    await eventually(lambda: srv.conn_of(idle_w) is not None, what="accepted")
    now[0] = 100.0
    active_w.write(encode_frame(RemotingCommand.request(ECHO, body=b"hi")))
    assert (await asyncio.wait_for(_read_frame(active_r), 10.0)).body == b"hi"
    now[0] = 130.0
    assert srv.server.close_idle(now[0]) == 1
    assert await asyncio.wait_for(idle_r.read(), 10.0) == b""
    srv.release.set()  # the held request was not idleness: it is still answered
    assert (await asyncio.wait_for(_read_frame(held_r), 10.0)).code == ResponseCode.SUCCESS
    active_w.write(encode_frame(RemotingCommand.request(ECHO, body=b"again")))
    assert (await asyncio.wait_for(_read_frame(active_r), 10.0)).body == b"again"
    for w in (active_w, idle_w, held_w):
        w.close()


_FD_SERVER = textwrap.dedent("""
    import asyncio, logging, resource, sys
    from ferrymq.common.codes import ResponseCode
    from ferrymq.remoting import RemotingCommand, RemotingServer, ServerConfig
    from ferrymq.remoting.loop import new_event_loop

    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)

    async def echo(conn, req):
        return RemotingCommand.make_response_to(req, ResponseCode.SUCCESS, body=req.body)

    async def main():
        server = RemotingServer(ServerConfig(accept_retry_delay=0.05, idle_timeout=0))
        server.register(1, echo)
        host, port = await server.start()
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (int(sys.argv[2]), hard))
        print(port, flush=True)
        await asyncio.Event().wait()

    loop = new_event_loop() if sys.argv[1] == "uvloop" else asyncio.new_event_loop()
    loop.run_until_complete(main())
""")


def _echo_blocking(sock: socket.socket, body: bytes, timeout: float = 10.0) -> bytes | None:
    sock.settimeout(timeout)
    sock.sendall(encode_frame(RemotingCommand.request(ECHO, body=body)))
    head = b""
    while len(head) < 4:
        chunk = sock.recv(4 - len(head))
        if not chunk:
            return None
        head += chunk
    (length,) = struct.unpack(">i", head)
    data = b""
    while len(data) < length:
        chunk = sock.recv(length - len(data))
        if not chunk:
            return None
        data += chunk
    return decode_frame(data).body


@pytest.mark.parametrize("loop_kind", ["asyncio", "uvloop"])
def test_running_out_of_file_descriptors_is_logged_and_serving_goes_on(loop_kind: str, tmp_path: Path) -> None:
    err_path = tmp_path / "stderr"
    with open(err_path, "wb") as err:
        proc = subprocess.Popen([sys.executable, "-c", _FD_SERVER, loop_kind, "64"],
                                stdout=subprocess.PIPE, stderr=err)
    socks: list[socket.socket] = []
    try:
        assert proc.stdout is not None
        port = int(proc.stdout.readline())
        first = socket.create_connection(("127.0.0.1", port))
        assert _echo_blocking(first, b"first") == b"first"
        # More connections than the server has descriptors for; the kernel queues the rest.
        for _ in range(80):
            socks.append(socket.create_connection(("127.0.0.1", port)))
        wait_until(lambda: b"cannot accept connections" in err_path.read_bytes(), timeout=20,
                   what="the out-of-descriptors log line")
        assert b"Too many open files" in err_path.read_bytes()
        # Connections already open are still served.
        assert _echo_blocking(first, b"still") == b"still"
        # Once descriptors are free again, the queued connections are accepted and served.
        for s in socks[:40]:
            s.close()
        assert _echo_blocking(socks[-1], b"late") == b"late"
        assert err_path.read_bytes().count(b"cannot accept connections") == 1  # rate-limited
        first.close()
    finally:
        for s in socks:
            s.close()
        proc.kill()
        proc.wait()
