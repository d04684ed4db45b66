"""A real `ferrymq dashboard` process beside a real server, its JSON endpoints over HTTP, and
a real headless Chromium (Debian's `chromium`) loading its page: DOM dumps and screenshots."""

from __future__ import annotations

import http.client
import json
import os
import shutil
import struct
import subprocess
import urllib.error
import urllib.request
import zlib
from pathlib import Path
from typing import Any

from conftest import Standalone, start_standalone
from ferrymq.embedded.process import ServerProcess
from ferrymq_cmd import run_ferrymq

CHROMIUM_FLAGS = (
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--disable-dev-shm-usage", "--hide-scrollbars",
)
# Virtual time the page gets to run its fetches before the DOM is taken; below the page's
# 5-second refresh so a dump never catches a refresh half done.
VIRTUAL_TIME_MS = 4000


def start_dashboard(namesrv: str, base: Path, *extra: str) -> ServerProcess:
    proc = ServerProcess(
        "dashboard",
        lambda: ["dashboard", "--namesrv", namesrv, "--port", "0", *extra],
        base / "dashboard.log",
        "dashboard",
    )
    proc.start()
    return proc


# Accounts of the ACL tests: the dashboard's own, and its users.
ADMIN = {"access_key": "dashAdmin1", "secret_key": "dashAdminSecret1"}  # the dashboard's own
OPS = {"access_key": "opsAdmin01", "secret_key": "opsAdminSecret01"}  # a user, admin
VIEWER = {"access_key": "viewer0001", "secret_key": "viewerSecret01"}  # a user, not admin

ACCOUNTS = """
accounts:
  - accessKey: dashAdmin1
    secretKey: dashAdminSecret1
    admin: true
  - accessKey: opsAdmin01
    secretKey: opsAdminSecret01
    admin: true
  - accessKey: viewer0001
    secretKey: viewerSecret01
    defaultTopicPerm: SUB
    defaultGroupPerm: SUB
    topicPerms: [dash-secret=DENY]
"""


def acl_args(acl: Path) -> list[str]:
    """`ferrymq dashboard` options for a login with the accounts of `acl`."""
    return ["--acl-file", str(acl), "--access-key", ADMIN["access_key"], "--secret-key", ADMIN["secret_key"],
            "--lag-interval", "0.5"]


def write_rules(path: Path, text: str) -> None:
    """Replace an ACL file in one step, with a new mtime even within the file system's
    timestamp granularity (the watchers compare it)."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text)
    old = path.stat().st_mtime_ns if path.exists() else 0
    os.replace(tmp, path)
    if path.stat().st_mtime_ns <= old:
        os.utime(path, ns=(old + 1_000_000, old + 1_000_000))


def start_acl_server(home: Path, rules: str) -> tuple[Standalone, Path]:
    """A standalone server checking the ACL file `rules` (reloaded within 50 ms of a change)."""
    acl = home / "plain_acl.yml"
    write_rules(acl, rules)
    config = home / "broker.toml"
    config.write_text("acl_reload_interval_ms = 50\n")
    return start_standalone(home / "store", "--config", str(config), "--acl-file", str(acl)), acl


class DashClient:
    """One browser's worth of requests to a dashboard: its session cookie and CSRF token kept,
    every header set as the test says (Origin, Host, ...), redirects not followed."""

    def __init__(self, addr: str) -> None:
        self.addr = addr
        self.cookie: str | None = None
        self.csrf = ""

    def request(self, method: str, path: str, body: Any = None, headers: dict[str, str | None] | None = None,
                ) -> tuple[int, dict[str, str], Any]:
        """Status, headers (lower-cased names) and the body (JSON decoded when it is JSON); a
        header given as None is not sent."""
        host, port = self.addr.rsplit(":", 1)
        conn = http.client.HTTPConnection(host, int(port), timeout=60)
        sent: dict[str, str | None] = {"Host": self.addr}
        data = None
        if body is not None:
            data = body if isinstance(body, bytes) else json.dumps(body).encode()
            sent.update({"Content-Type": "application/json", "Origin": f"http://{self.addr}"})
            if self.csrf:
                sent["X-CSRF-Token"] = self.csrf
        if self.cookie:
            sent["Cookie"] = self.cookie
        sent.update(headers or {})
        try:
            conn.request(method, path, body=data, headers={k: v for k, v in sent.items() if v is not None})
            resp = conn.getresponse()
            raw = resp.read()
            got = {k.lower(): v for k, v in resp.getheaders()}
        finally:
            conn.close()
        decoded: Any = json.loads(raw) if got.get("content-type", "").startswith("application/json") else raw
        return resp.status, got, decoded

    def get(self, path: str, headers: dict[str, str | None] | None = None) -> tuple[int, Any]:
        status, _, body = self.request("GET", path, headers=headers)
        return status, body

    def post(self, path: str, body: Any, headers: dict[str, str | None] | None = None) -> tuple[int, Any]:
        status, _, data = self.request("POST", path, body, headers)
        return status, data

    def login(self, access_key: str, secret_key: str) -> tuple[int, dict[str, str], Any]:
        status, headers, data = self.request("POST", "/api/login", {"access_key": access_key, "secret_key": secret_key})
        if status == 200:
            self.cookie = headers["set-cookie"].split(";")[0]
            self.csrf = data["csrf"]
        return status, headers, data


def cli_json(namesrv: str, *args: str) -> Any:
    """`ferrymq ARGS --json` as a user runs it, parsed."""
    proc = run_ferrymq(*args, "--namesrv", namesrv, "--json")
    if proc.returncode != 0:
        raise AssertionError(f"ferrymq {' '.join(args)} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}")
    return json.loads(proc.stdout)


def get_json(addr: str, path: str) -> Any:
    with urllib.request.urlopen(f"http://{addr}{path}", timeout=60) as resp:
        return json.loads(resp.read())


def csrf_token(addr: str) -> str:
    """The token a dashboard without login wants on every POST (what its page gets)."""
    token: str = get_json(addr, "/api/session")["csrf"]
    return token


def post_json(addr: str, path: str, body: Any) -> Any:
    req = urllib.request.Request(f"http://{addr}{path}", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json", "X-CSRF-Token": csrf_token(addr)},
                                 method="POST")
    with urllib.request.urlopen(req, timeout=60) as resp:
        return json.loads(resp.read())


def http_error(addr: str, path: str, body: Any | None = None,
               content_type: str = "application/json") -> tuple[int, dict[str, Any]]:
    """The status and error object of a request expected to fail."""
    data = None if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
    headers = {"Content-Type": content_type}
    if data is not None:
        headers["X-CSRF-Token"] = csrf_token(addr)
    req = urllib.request.Request(f"http://{addr}{path}", data=data, headers=headers,
                                 method="GET" if data is None else "POST")
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:
            raise AssertionError(f"{path} answered {resp.status}: {resp.read()[:200]!r}")
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())["error"]


def chromium() -> str:
    path = shutil.which("chromium")
    if path is None:
        raise AssertionError("chromium is not installed: `make chromium` installs Debian's package")
    return path


def _run_chromium(tmp: Path, *args: str) -> subprocess.CompletedProcess[str]:
    profile = tmp / "chromium-profile"
    profile.mkdir(parents=True, exist_ok=True)
    return subprocess.run(
        [chromium(), *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *args],
        capture_output=True, text=True, timeout=120, check=True,
    )


def dump_dom(url: str, tmp: Path, budget_ms: int = VIRTUAL_TIME_MS) -> str:
    """The page's DOM once its scripts ran and its fetches completed."""
    return _run_chromium(tmp, f"--virtual-time-budget={budget_ms}", "--dump-dom", url).stdout


def screenshot(url: str, tmp: Path, name: str, size: tuple[int, int] = (1280, 900),
               budget_ms: int = VIRTUAL_TIME_MS) -> Path:
    out = tmp / name
    _run_chromium(tmp, f"--virtual-time-budget={budget_ms}", f"--window-size={size[0]},{size[1]}",
                  f"--screenshot={out}", url)
    return out


def png_pixels(path: Path) -> tuple[int, int, list[bytes]]:
    """Width, height and rows of pixels (bytes per pixel 3 or 4) of an 8-bit RGB(A),
    non-interlaced PNG: what Chromium writes."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG file"
    pos, idat = 8, b""
    width = height = bpp = 0
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind, chunk = data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + length]
        pos += 12 + length
        if kind == b"IHDR":
            width, height, depth, color, _, _, interlace = struct.unpack(">IIBBBBB", chunk)
            assert depth == 8 and color in (2, 6) and interlace == 0, (depth, color, interlace)
            bpp = 3 if color == 2 else 4
        elif kind == b"IDAT":
            idat += chunk
        elif kind == b"IEND":
            break
    raw = zlib.decompress(idat)
    stride = width * bpp
    rows: list[bytes] = []
    prev = bytearray(stride)
    for y in range(height):
        start = y * (stride + 1)
        ftype, line = raw[start], bytearray(raw[start + 1 : start + 1 + stride])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b = prev[i]
            c = prev[i - bpp] if i >= bpp else 0
            if ftype == 1:
                line[i] = (line[i] + a) & 0xFF
            elif ftype == 2:
                line[i] = (line[i] + b) & 0xFF
            elif ftype == 3:
                line[i] = (line[i] + (a + b) // 2) & 0xFF
            elif ftype == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 0xFF
        rows.append(bytes(line))
        prev = line
    return width, height, rows


def colours(rows: list[bytes], bpp: int, every: int = 4) -> set[bytes]:
    """Distinct pixel values on a grid of every `every`-th pixel."""
    seen: set[bytes] = set()
    for row in rows[::every]:
        for x in range(0, len(row) - bpp + 1, bpp * every):
            seen.add(row[x : x + bpp])
    return seen
