"""The dashboard's HTTP server on real sockets (keep-alive, refusals, handler failures), the
request parsing, the lag history's bounds and the topic list's paging."""

from __future__ import annotations

import asyncio

import pytest

from ferrymq.dashboard.api import MAX_PAGE, page_of, topic_kind
from ferrymq.dashboard.httpd import MAX_BODY_BYTES, HttpError, HttpServer, Request, Response, parse_head
from ferrymq.dashboard.lag import LagHistory, LagSample


async def echo(request: Request) -> Response:
    if request.path == "/boom":
        raise RuntimeError("handler bug")
    if request.path == "/refuse":
        raise HttpError(409, "refused")
    if request.method == "POST":
        return Response.json({"got": request.json()})
    return Response.json({"path": request.path, "query": request.query})


async def exchange(addr: str, raw: bytes, responses: int = 1) -> list[tuple[int, dict[str, str], bytes]]:
    host, port = addr.split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(raw)
    await writer.drain()
    out = []
    for _ in range(responses):
        head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
        status = int(head[0].split()[1])
        headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in head[1:] if line)}
        body = await reader.readexactly(int(headers["content-length"])) if "content-length" in headers else b""
        out.append((status, headers, body))
    writer.close()
    return out


@pytest.fixture
async def server() -> object:
    srv = HttpServer(echo, "127.0.0.1", 0)
    await srv.start()
    yield srv
    await srv.close()


async def test_two_requests_on_one_kept_alive_connection(server: HttpServer) -> None:
    raw = (b"GET /a?x=1&x=2&y=%20z HTTP/1.1\r\nHost: t\r\n\r\n"
           b"POST /b HTTP/1.1\r\nContent-Type: application/json\r\nContent-Length: 9\r\n\r\n{\"k\": 1}\n")
    (s1, h1, b1), (s2, _, b2) = await exchange(server.address, raw, responses=2)
    assert (s1, b1) == (200, b'{"path":"/a","query":{"x":"2","y":" z"}}')
    assert h1["connection"] == "keep-alive" and h1["content-type"].startswith("application/json")
    assert (s2, b2) == (200, b'{"got":{"k":1}}')


async def test_refusals_and_failures_answer_with_an_error_object(server: HttpServer) -> None:
    [(status, _, body)] = await exchange(server.address, b"GARBAGE\r\n\r\n")
    assert status == 400 and b"bad request line" in body
    big = f"POST /b HTTP/1.1\r\nContent-Length: {MAX_BODY_BYTES + 1}\r\n\r\n".encode()
    [(status, headers, _)] = await exchange(server.address, big)
    assert status == 413 and headers["connection"] == "close"
    form = b"POST /b HTTP/1.1\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n\r\nhi"
    assert (await exchange(server.address, form))[0][0] == 415
    [(status, _, body)] = await exchange(server.address, b"GET /boom HTTP/1.1\r\n\r\n")
    assert status == 500 and b"handler bug" not in body  # the log has it, not the client
    assert (await exchange(server.address, b"GET /refuse HTTP/1.1\r\n\r\n"))[0][0] == 409
    # The server still answers after all that.
    assert (await exchange(server.address, b"GET /ok HTTP/1.1\r\nConnection: close\r\n\r\n"))[0][0] == 200


async def test_head_gets_the_headers_without_the_body(server: HttpServer) -> None:
    raw = b"HEAD /x HTTP/1.1\r\nConnection: close\r\n\r\n"
    host, port = server.address.split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(raw)
    data = await reader.read()  # the server closes: everything it sent
    writer.close()
    head, _, rest = data.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200") and b"Content-Length: " in head and rest == b""


def test_parse_head_lowercases_headers_and_decodes_the_path() -> None:
    method, path, query, headers = parse_head(b"get /api/topic%20x?name=a%25b HTTP/1.1\r\nX-Thing:  v \r\n")
    assert (method, path, query, headers) == ("GET", "/api/topic x", {"name": "a%b"}, {"x-thing": "v"})
    with pytest.raises(HttpError):
        parse_head(b"GET / SPDY/3\r\n")
    with pytest.raises(HttpError):
        parse_head(b"GET / HTTP/1.1\r\nno colon here\r\n")


def test_lag_history_keeps_the_last_samples_of_the_most_recent_groups() -> None:
    history = LagHistory(capacity=3, max_groups=2)
    for t in range(5):
        history.add("a", LagSample(t, t * 10))
    assert [s.lag for s in history.series("a")] == [20, 30, 40]
    history.add("b", LagSample(5, 1))
    history.add("a", LagSample(6, 0))  # a is now the most recent
    history.add("c", LagSample(7, 2))  # b, the least recently sampled, goes
    assert history.groups() == ["a", "c"]
    latest = history.latest("a")
    assert latest is not None and latest.to_json() == {"t": 6, "lag": 0, "retry_lag": 0}
    assert history.series("b") == [] and history.latest("b") is None


def test_page_of_clamps_the_window() -> None:
    items = list(range(10))
    assert page_of(items, 0, 3) == ([0, 1, 2], 0, 3)
    assert page_of(items, 8, 5) == ([8, 9], 8, 5)
    assert page_of(items, 50, 5) == ([9], 9, 5)
    assert page_of(items, -4, 0) == ([0], 0, 1)
    assert page_of(list(range(1000)), 0, 10_000)[2] == MAX_PAGE
    assert page_of([], 3, 5) == ([], 0, 5)


def test_topic_kinds() -> None:
    names = frozenset({"broker-a", "DefaultCluster"})
    assert [topic_kind(t, names) for t in ("orders", "%RETRY%g", "%DLQ%g", "TBW102", "rmq_sys_x", "broker-a")] == [
        "normal", "retry", "dlq", "system", "system", "system"]


async def test_a_client_stalling_inside_a_request_is_dropped() -> None:
    srv = HttpServer(echo, "127.0.0.1", 0, idle_timeout=0.3)
    await srv.start()
    try:
        host, port = srv.address.split(":")
        for stalled in (b"GET /a HTTP/1.1\r\nHost: t\r\n",  # a head never finished
                        b"POST /b HTTP/1.1\r\nContent-Length: 10\r\n\r\n{}"):  # a body cut short
            reader, writer = await asyncio.open_connection(host, int(port))
            writer.write(stalled)
            assert await asyncio.wait_for(reader.read(), 10) == b""  # closed, nothing answered
            writer.close()
        assert (await exchange(srv.address, b"GET /ok HTTP/1.1\r\nConnection: close\r\n\r\n"))[0][0] == 200
    finally:
        await srv.close()
