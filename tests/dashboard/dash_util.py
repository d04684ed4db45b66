"""A real `ferrymq dashboard` process beside a real server, its JSON endpoints over HTTP, and
a real headless Chromium (Debian's `chromium`) loading its page: DOM dumps and screenshots."""

from __future__ import annotations

import json
import shutil
import struct
import subprocess
import sys
import urllib.error
import urllib.request
import zlib
from pathlib import Path
from typing import Any

from ferrymq.embedded.process import ServerProcess

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


def cli_json(namesrv: str, *args: str) -> Any:
    """`ferrymq ARGS --json` as a user runs it, parsed."""
    proc = subprocess.run([sys.executable, "-m", "ferrymq", *args, "--namesrv", namesrv, "--json"],
                          capture_output=True, text=True, timeout=60)
    if proc.returncode != 0:
        raise AssertionError(f"ferrymq {' '.join(args)} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}")
    return json.loads(proc.stdout)


def get_json(addr: str, path: str) -> Any:
    with urllib.request.urlopen(f"http://{addr}{path}", timeout=60) as resp:
        return json.loads(resp.read())


def post_json(addr: str, path: str, body: Any) -> Any:
    req = urllib.request.Request(f"http://{addr}{path}", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"}, method="POST")
    with urllib.request.urlopen(req, timeout=60) as resp:
        return json.loads(resp.read())


def http_error(addr: str, path: str, body: Any | None = None,
               content_type: str = "application/json") -> tuple[int, dict[str, Any]]:
    """The status and error object of a request expected to fail."""
    data = None if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
    req = urllib.request.Request(f"http://{addr}{path}", data=data, headers={"Content-Type": content_type},
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
