"""What a process has cost, read from Linux's /proc, for the benches that put CPU per message
beside their rates."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path


def process_cpu(pid: int) -> float:
    """Seconds of CPU (user + system) the process has used: /proc/PID/stat's utime + stime."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def process_cpu_ns(pid: int) -> int:
    """Nanoseconds of CPU the process's threads have run so far (/proc/PID/task/*/schedstat):
    finer than process_cpu's clock ticks (10 ms), for costs of a few microseconds a request.
    A thread that has ended no longer counts."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(FileNotFoundError, ProcessLookupError):  # a thread that ended
            total += int((task / "schedstat").read_text().split()[0])
    return total
