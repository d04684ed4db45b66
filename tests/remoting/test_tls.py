"""TLS on a remoting port in RocketMQ's three modes, over real loopback sockets with
certificates made here: who is served, who is refused and what they are told."""

from __future__ import annotations

import asyncio
import socket
import ssl
import struct
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

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
    ServerConfig,
    encode_frame,
)
from ferrymq.remoting.tls import (
    ClientAuth,
    TlsClientSettings,
    TlsConfigError,
    TlsMode,
    TlsServerSettings,
    resolve_client_tls,
)
from ferrymq.remoting.tls_accept import PLAIN_REFUSED_REMARK
from tlscerts import TlsFiles, make_tls_files

ECHO = 1


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> TlsFiles:
    return make_tls_files(tmp_path_factory.mktemp("tls"))


def server_tls(certs: TlsFiles, mode: TlsMode, **kw: object) -> TlsServerSettings:
    kw.setdefault("handshake_timeout", 2.0)
    return TlsServerSettings(mode=mode, cert_path=str(certs.cert), key_path=str(certs.key),
                             **kw)  # type: ignore[arg-type]


async def echo(conn: Connection, req: RemotingCommand) -> RemotingCommand:
    return RemotingCommand.make_response_to(req, ResponseCode.SUCCESS, body=req.body)


async def started(tls: TlsServerSettings) -> tuple[RemotingServer, str]:
    server = RemotingServer(ServerConfig(shutdown_grace=0.5, tls=tls))
    server.register(ECHO, echo)
    host, port = await server.start()
    return server, f"{host}:{port}"


def tls_client(certs: TlsFiles, **kw: object) -> RemotingClient:
    settings = TlsClientSettings(enabled=True, trust_cert_path=str(certs.ca), **kw)  # type: ignore[arg-type]
    return RemotingClient(ClientConfig(connect_timeout=3.0, tls=settings))


async def ask(client: RemotingClient, addr: str, text: str) -> RemotingCommand:
    return await client.invoke(addr, RemotingCommand.request(ECHO, body=text.encode()))


@pytest.fixture
async def closing() -> AsyncIterator[list[RemotingClient | RemotingServer]]:
    things: list[RemotingClient | RemotingServer] = []
    yield things
    for thing in reversed(things):
        if isinstance(thing, RemotingServer):
            await thing.stop()
        else:
            await thing.close()


async def test_enforcing_serves_tls_and_refuses_plain_with_a_reason(certs: TlsFiles, closing: list) -> None:
    server, addr = await started(server_tls(certs, TlsMode.ENFORCING))
    secure, plain = tls_client(certs), RemotingClient()
    closing += [server, secure, plain]

    resp = await ask(secure, addr, "over tls")
    assert resp.code == ResponseCode.SUCCESS and resp.body == b"over tls"

    refused = await ask(plain, addr, "in the clear")
    assert refused.code == ResponseCode.SYSTEM_ERROR
    assert refused.remark == PLAIN_REFUSED_REMARK
    assert server.tls is not None and server.tls.plain_refused == 1

    # The refusal harmed nobody else: the TLS client's connection goes on, new ones too.
    assert (await ask(secure, addr, "still here")).body == b"still here"
    again = tls_client(certs)
    closing.append(again)
    assert (await ask(again, addr, "new")).body == b"new"


async def test_permissive_serves_tls_and_plain_on_one_port(certs: TlsFiles, closing: list) -> None:
    server, addr = await started(server_tls(certs, TlsMode.PERMISSIVE))
    secure, plain = tls_client(certs), RemotingClient()
    closing += [server, secure, plain]
    for i in range(3):
        assert (await ask(secure, addr, f"tls {i}")).body == f"tls {i}".encode()
        assert (await ask(plain, addr, f"plain {i}")).body == f"plain {i}".encode()
    assert len(server.connections) == 2
    cipher = [c for c in server.connections if c._transport is not None
              and c._transport.get_extra_info("ssl_object") is not None]
    assert len(cipher) == 1, "exactly one of the two connections is encrypted"


async def test_large_bodies_both_ways_over_tls(certs: TlsFiles, closing: list) -> None:
    server, addr = await started(server_tls(certs, TlsMode.ENFORCING))
    client = tls_client(certs)
    closing += [server, client]
    body = bytes(range(256)) * 4096  # 1 MiB: many TLS records per frame
    replies = await asyncio.gather(*(client.invoke(addr, RemotingCommand.request(ECHO, body=body), 10.0)
                                     for _ in range(8)))
    assert all(r.body == body for r in replies)


async def test_disabled_mode_is_plain_and_a_tls_client_gets_a_handshake_error(certs: TlsFiles,
                                                                              closing: list) -> None:
    server, addr = await started(TlsServerSettings())
    secure, plain = tls_client(certs), RemotingClient()
    closing += [server, secure, plain]
    with pytest.raises(RemotingConnectError, match="TLS handshake failed"):
        await ask(secure, addr, "x")
    assert (await ask(plain, addr, "fine")).body == b"fine"


async def test_wrong_ca_is_a_certificate_error(certs: TlsFiles, closing: list) -> None:
    server, addr = await started(server_tls(certs, TlsMode.ENFORCING))
    wrong = RemotingClient(ClientConfig(tls=TlsClientSettings(enabled=True, trust_cert_path=str(certs.other_ca))))
    closing += [server, wrong]
    with pytest.raises(RemotingConnectError, match="TLS certificate verification failed") as info:
        await ask(wrong, addr, "x")
    assert "certificate" in str(info.value) and addr in str(info.value)
    # The server goes on serving clients that trust its CA.
    good = tls_client(certs)
    closing.append(good)
    assert (await ask(good, addr, "ok")).body == b"ok"


async def test_no_verification_accepts_an_unknown_ca(certs: TlsFiles, closing: list) -> None:
    server, addr = await started(server_tls(certs, TlsMode.ENFORCING))
    client = RemotingClient(ClientConfig(tls=TlsClientSettings(enabled=True, verify=False)))
    closing += [server, client]
    assert (await ask(client, addr, "anyone")).body == b"anyone"


async def test_required_client_certificate(certs: TlsFiles, closing: list) -> None:
    server, addr = await started(server_tls(certs, TlsMode.ENFORCING, trust_cert_path=str(certs.ca),
                                            need_client_auth=ClientAuth.REQUIRE))
    anonymous = tls_client(certs)
    known = tls_client(certs, cert_path=str(certs.client_cert), key_path=str(certs.client_key))
    closing += [server, anonymous, known]
    assert (await ask(known, addr, "me")).body == b"me"
    # TLS 1.3 finishes the client's side of the handshake before the server checks the
    # client's certificate: the refusal arrives as the connection closing.
    with pytest.raises((RemotingClosedError, RemotingConnectError)):
        await ask(anonymous, addr, "who")
    assert server.tls is not None and server.tls.handshake_failures == 1


async def test_silent_and_garbage_connections_do_not_block_the_port(certs: TlsFiles, closing: list) -> None:
    server, addr = await started(server_tls(certs, TlsMode.PERMISSIVE))
    client = tls_client(certs)
    closing += [server, client]
    host, port = addr.rsplit(":", 1)
    silent = socket.create_connection((host, int(port)))
    fake_hello = socket.create_connection((host, int(port)))
    fake_hello.sendall(b"\x16\x03\x01\x00\x05hello")  # a TLS record header, then nonsense
    try:
        assert (await ask(client, addr, "served")).body == b"served"
        # The fake handshake fails and is closed; the silent one is closed at the timeout.
        loop = asyncio.get_running_loop()
        assert await asyncio.wait_for(loop.run_in_executor(None, _read_until_closed, fake_hello), 5.0) == b""
        assert await asyncio.wait_for(loop.run_in_executor(None, _read_until_closed, silent), 5.0) == b""
        assert server.tls is not None and server.tls.handshake_failures >= 1
    finally:
        silent.close()
        fake_hello.close()


async def test_stop_does_not_wait_for_silent_connections(certs: TlsFiles) -> None:
    server, addr = await started(server_tls(certs, TlsMode.PERMISSIVE, handshake_timeout=30.0))
    host, port = addr.rsplit(":", 1)
    silent = socket.create_connection((host, int(port)))
    try:
        await asyncio.sleep(0)  # let the accept run
        await asyncio.wait_for(server.stop(), 5.0)
    finally:
        silent.close()


def _read_until_closed(sock: socket.socket) -> bytes:
    sock.settimeout(5.0)
    data = b""
    while True:
        try:
            chunk = sock.recv(4096)
        except ConnectionResetError:
            return b""
        if not chunk:
            return b""
        data += chunk
        if len(data) > 1 << 20:
            return data


def test_plain_refusal_answers_the_request_by_its_opaque(certs: TlsFiles) -> None:
    """A raw socket, as any RocketMQ client in the clear: the answer carries its opaque."""
    async def main() -> None:
        server, addr = await started(server_tls(certs, TlsMode.ENFORCING))
        try:
            host, port = addr.rsplit(":", 1)
            reader, writer = await asyncio.open_connection(host, int(port))
            req = RemotingCommand.request(ECHO, body=b"hi")
            writer.write(encode_frame(req))
            (length,) = struct.unpack(">I", await reader.readexactly(4))
            frame = await reader.readexactly(length)
            from ferrymq.remoting import decode_frame
            resp = decode_frame(frame)
            assert resp.opaque == req.opaque and resp.is_response
            assert "TLS required" in (resp.remark or "")
            assert await reader.read() == b""
            writer.close()
        finally:
            await server.stop()

    asyncio.run(main())


def test_settings_validation(certs: TlsFiles) -> None:
    with pytest.raises(TlsConfigError, match="tls_server_cert_path"):
        TlsServerSettings(mode=TlsMode.ENFORCING).validate()
    with pytest.raises(TlsConfigError, match="not disabled, permissive or enforcing"):
        TlsMode.parse("strict")
    assert TlsMode.parse(" Permissive ") is TlsMode.PERMISSIVE
    assert ClientAuth.parse(True) is ClientAuth.REQUIRE and ClientAuth.parse("optional") is ClientAuth.OPTIONAL


def test_missing_certificate_stops_the_start(tmp_path: Path) -> None:
    settings = TlsServerSettings(mode=TlsMode.ENFORCING, cert_path=str(tmp_path / "nope.pem"),
                                 key_path=str(tmp_path / "nope.key"))

    async def main() -> None:
        server = RemotingServer(ServerConfig(tls=settings))
        with pytest.raises(OSError, match="not found"):
            await server.start()

    asyncio.run(main())


def test_client_settings_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    env = {"FERRYMQ_TLS": "1", "FERRYMQ_TLS_CA": "/ca.pem", "FERRYMQ_TLS_VERIFY": "false"}
    s = TlsClientSettings.from_env(env)
    assert s.enabled and s.trust_cert_path == "/ca.pem" and not s.verify
    assert not TlsClientSettings.from_env({}).enabled
    monkeypatch.setenv("FERRYMQ_TLS", "true")
    assert resolve_client_tls(None).enabled
    assert not resolve_client_tls(False).enabled
    explicit = TlsClientSettings(enabled=True, trust_cert_path="x")
    assert resolve_client_tls(explicit) is explicit
    assert isinstance(ssl.PROTOCOL_TLS_CLIENT, int)


async def test_protocol_server_permissive_serves_tls_and_plain(certs: TlsFiles) -> None:
    """The replication port's server: the same first-byte choice for a protocol's connections."""
    from ferrymq.remoting.tls import client_context
    from ferrymq.remoting.tls_streams import start_protocol_server

    class EchoLine(asyncio.Protocol):
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            self.transport: Any = transport
            self.got = b""

        def data_received(self, data: bytes) -> None:
            self.got += data
            if self.got.endswith(b"\n"):
                secure = self.transport.get_extra_info("ssl_object") is not None
                self.transport.write(b"tls:" + self.got if secure else b"plain:" + self.got)
                self.transport.close()

    server = await start_protocol_server(EchoLine, "127.0.0.1", 0, server_tls(certs, TlsMode.PERMISSIVE))
    host, port = server.sockets[0].getsockname()[:2]
    try:
        ctx = client_context(TlsClientSettings(enabled=True, trust_cert_path=str(certs.ca)))
        for ssl_ctx, expected in ((ctx, b"tls:hi\n"), (None, b"plain:hi\n")):
            reader, writer = await asyncio.open_connection(host, port, ssl=ssl_ctx,
                                                           server_hostname=host if ssl_ctx else None)
            writer.write(b"hi\n")
            assert await asyncio.wait_for(reader.read(), 5.0) == expected
            writer.close()
    finally:
        server.close()
        await asyncio.wait_for(server.wait_closed(), 5.0)
