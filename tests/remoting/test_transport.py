"""Server and client over real loopback sockets: correlation, oneway, timeouts, many requests
in flight, server-to-client requests, bad input that harms only its own connection."""

from __future__ import annotations

import asyncio
import socket
import struct
from collections.abc import AsyncIterator

import pytest

from ferrymq.common.codes import ResponseCode
from ferrymq.remoting import (
    ClientConfig,
    Connection,
    RemotingClient,
    RemotingClosedError,
    RemotingCommand,
    RemotingConnectError,
    RemotingServer,
    RemotingTimeoutError,
    ServerConfig,
    encode_frame,
)

ECHO, SLOW, HOLD, ONEWAY, ASK_BACK, BOOM = 1, 2, 3, 4, 5, 6


class Fixture:
    def __init__(self) -> None:
        self.server = RemotingServer(ServerConfig(max_frame_size=1024 * 1024, shutdown_grace=0.5))
        self.oneway_seen = asyncio.Queue[RemotingCommand]()
        self.release = asyncio.Event()
        self.addr = ""

    async def start(self) -> None:
        async def echo(conn: Connection, req: RemotingCommand) -> RemotingCommand:
            return RemotingCommand.make_response_to(req, ResponseCode.SUCCESS, remark=req.remark,
                                                    ext_fields=dict(req.ext_fields), body=req.body)

        async def slow(conn: Connection, req: RemotingCommand) -> RemotingCommand:
            await asyncio.sleep(float(req.ext_fields["delay"]))
            return RemotingCommand.make_response_to(req, ResponseCode.SUCCESS,
                                                    ext_fields=dict(req.ext_fields))

        async def hold(conn: Connection, req: RemotingCommand) -> RemotingCommand:
            await self.release.wait()
            return RemotingCommand.make_response_to(req, ResponseCode.SUCCESS)

        async def oneway(conn: Connection, req: RemotingCommand) -> None:
            await self.oneway_seen.put(req)

        async def ask_back(conn: Connection, req: RemotingCommand) -> RemotingCommand:
            answer = await conn.invoke(RemotingCommand.request(40, ext_fields={"q": "hi"}), 2.0)
            return RemotingCommand.make_response_to(req, ResponseCode.SUCCESS,
                                                    remark=answer.ext_fields.get("a"))

        async def boom(conn: Connection, req: RemotingCommand) -> RemotingCommand:
            raise ValueError("kaput")

        for code, h in ((ECHO, echo), (SLOW, slow), (HOLD, hold), (ONEWAY, oneway),
                        (ASK_BACK, ask_back), (BOOM, boom)):
            self.server.register(code, h)
        host, port = await self.server.start()
        self.addr = f"{host}:{port}"


@pytest.fixture
async def fx() -> AsyncIterator[Fixture]:
    f = Fixture()
    await f.start()
    yield f
    f.release.set()
    await f.server.stop()


@pytest.fixture
async def client() -> AsyncIterator[RemotingClient]:
    c = RemotingClient(ClientConfig(connect_timeout=2.0))
    yield c
    await c.close()



async def test_request_response_round_trip(fx: Fixture, client: RemotingClient) -> None:
    req = RemotingCommand.request(ECHO, ext_fields={"k": "v"}, body=b"\x00\x01payload")
    req.remark = "r"
    resp = await client.invoke(fx.addr, req, 2.0)
    assert resp.code == ResponseCode.SUCCESS and resp.opaque == req.opaque
    assert resp.ext_fields == {"k": "v"} and resp.body == b"\x00\x01payload" and resp.remark == "r"


async def test_many_requests_in_flight_are_matched_by_opaque(fx: Fixture, client: RemotingClient) -> None:
    # Replies come back in the reverse order of the requests: the slowest was sent first.
    reqs = [RemotingCommand.request(SLOW, ext_fields={"delay": f"{(50 - i) / 1000}", "i": str(i)})
            for i in range(50)]
    resps = await asyncio.gather(*(client.invoke(fx.addr, r, 5.0) for r in reqs))
    assert [r.ext_fields["i"] for r in resps] == [str(i) for i in range(50)]


async def test_a_held_request_does_not_block_the_ones_behind_it(fx: Fixture, client: RemotingClient) -> None:
    held = asyncio.ensure_future(client.invoke(fx.addr, RemotingCommand.request(HOLD), 5.0))
    resp = await client.invoke(fx.addr, RemotingCommand.request(ECHO), 2.0)
    assert resp.code == ResponseCode.SUCCESS and not held.done()
    fx.release.set()
    assert (await held).code == ResponseCode.SUCCESS


async def test_timeout_raises_typed_error_and_connection_stays_usable(fx: Fixture, client: RemotingClient) -> None:
    with pytest.raises(RemotingTimeoutError) as info:
        await client.invoke(fx.addr, RemotingCommand.request(HOLD), 0.1)
    assert info.value.code == HOLD and info.value.addr == fx.addr
    assert (await client.invoke(fx.addr, RemotingCommand.request(ECHO), 2.0)).code == 0


async def test_oneway_reaches_handler_and_gets_no_answer(fx: Fixture, client: RemotingClient) -> None:
    await client.invoke_oneway(fx.addr, RemotingCommand.request(ONEWAY, ext_fields={"x": "1"}))
    got = await asyncio.wait_for(fx.oneway_seen.get(), 2.0)
    assert got.is_oneway and got.ext_fields == {"x": "1"}


async def test_unknown_code_is_answered_not_supported(fx: Fixture, client: RemotingClient) -> None:
    resp = await client.invoke(fx.addr, RemotingCommand.request(999), 2.0)
    assert resp.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
    assert resp.remark is not None and "999" in resp.remark


async def test_handler_exception_becomes_system_error(fx: Fixture, client: RemotingClient) -> None:
    resp = await client.invoke(fx.addr, RemotingCommand.request(BOOM), 2.0)
    assert resp.code == ResponseCode.SYSTEM_ERROR and resp.remark is not None and "kaput" in resp.remark


async def test_server_can_ask_the_client_over_its_connection(fx: Fixture, client: RemotingClient) -> None:
    async def answer(conn: Connection, req: RemotingCommand) -> RemotingCommand:
        return RemotingCommand.make_response_to(req, 0, ext_fields={"a": req.ext_fields["q"] + "!"})

    client.register(40, answer)
    resp = await client.invoke(fx.addr, RemotingCommand.request(ASK_BACK), 3.0)
    assert resp.remark == "hi!"


async def test_connect_refused_is_a_typed_error(client: RemotingClient) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(RemotingConnectError) as info:
        await client.invoke(f"127.0.0.1:{port}", RemotingCommand.request(ECHO), 1.0)
    assert info.value.addr == f"127.0.0.1:{port}"


async def test_pending_requests_fail_when_the_server_stops(fx: Fixture, client: RemotingClient) -> None:
    held = asyncio.ensure_future(client.invoke(fx.addr, RemotingCommand.request(HOLD), 10.0))
    while not fx.server.connections or not any(c.inflight for c in fx.server.connections):
        await asyncio.sleep(0.005)
    await fx.server.stop()
    with pytest.raises(RemotingClosedError):
        await held


async def _raw(addr: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    host, port = addr.rsplit(":", 1)
    return await asyncio.open_connection(host, int(port))


async def _read_frame(reader: asyncio.StreamReader) -> RemotingCommand:
    from ferrymq.remoting import decode_frame

    (length,) = struct.unpack(">i", await reader.readexactly(4))
    return decode_frame(await reader.readexactly(length))


@pytest.mark.parametrize("garbage", [
    struct.pack(">i", 100 * 1024 * 1024) + b"x" * 64,     # a 100 MiB length prefix
    b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",                 # another protocol
    struct.pack(">i", 2) + b"zz",                          # length too small to hold a header
])
async def test_unframeable_input_closes_only_that_connection(
        fx: Fixture, client: RemotingClient, garbage: bytes) -> None:
    ok = await client.invoke(fx.addr, RemotingCommand.request(ECHO), 2.0)
    reader, writer = await _raw(fx.addr)
    writer.write(garbage)
    await writer.drain()
    assert await asyncio.wait_for(reader.read(), 2.0) == b""  # closed by the server
    writer.close()
    again = await client.invoke(fx.addr, RemotingCommand.request(ECHO, body=b"still"), 2.0)
    assert ok.code == again.code == 0 and again.body == b"still"


async def test_malformed_header_in_a_sound_frame_is_answered_and_the_stream_goes_on(fx: Fixture) -> None:
    reader, writer = await _raw(fx.addr)
    bad = b"{nope"
    writer.write(struct.pack(">ii", 4 + len(bad), len(bad)) + bad)
    good = RemotingCommand.request(ECHO, body=b"after")
    writer.write(encode_frame(good))
    await writer.drain()
    err = await asyncio.wait_for(_read_frame(reader), 2.0)
    assert err.code == ResponseCode.SYSTEM_ERROR and err.remark and "malformed" in err.remark
    resp = await asyncio.wait_for(_read_frame(reader), 2.0)
    assert resp.opaque == good.opaque and resp.body == b"after"
    writer.close()


@pytest.mark.parametrize("bad", [
    b"[" * 200_000,                                                     # nesting as the header
    b'{"code":1,"extFields":{"k":' + b"[" * 200_000 + b"]" * 200_000 + b"}}",  # in a value
])
async def test_deeply_nested_json_header_is_a_malformed_frame_not_a_traceback(
        fx: Fixture, bad: bytes, caplog: pytest.LogCaptureFixture) -> None:
    reader, writer = await _raw(fx.addr)
    writer.write(struct.pack(">ii", 4 + len(bad), len(bad)) + bad)
    good = RemotingCommand.request(ECHO, body=b"after")
    writer.write(encode_frame(good))
    await writer.drain()
    err = await asyncio.wait_for(_read_frame(reader), 5.0)
    assert err.code == ResponseCode.SYSTEM_ERROR and err.remark and "malformed" in err.remark
    resp = await asyncio.wait_for(_read_frame(reader), 5.0)
    assert resp.opaque == good.opaque and resp.body == b"after"
    writer.close()
    assert not [r for r in caplog.records if r.exc_info], "a traceback was logged"


async def test_truncated_frame_then_disconnect_leaves_server_serving(fx: Fixture, client: RemotingClient) -> None:
    _, writer = await _raw(fx.addr)
    frame = encode_frame(RemotingCommand.request(ECHO, body=b"x" * 1000))
    writer.write(frame[:500])
    await writer.drain()
    writer.close()
    resp = await client.invoke(fx.addr, RemotingCommand.request(ECHO, body=b"y"), 2.0)
    assert resp.body == b"y"


async def test_large_body_round_trips(fx: Fixture, client: RemotingClient) -> None:
    body = bytes(range(256)) * 3000  # 768 KiB, under the 1 MiB frame limit of this server
    resp = await client.invoke(fx.addr, RemotingCommand.request(ECHO, body=body), 5.0)
    assert resp.body == body
