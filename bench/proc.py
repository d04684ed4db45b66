"""What a process has cost, read from Linux's /proc, for the benches that put CPU per message
beside their rates."""

from __future__ import annotations

import os
from pathlib import Path


def process_cpu(pid: int) -> float:
    """Seconds of CPU (user + system) the process has used: /proc/PID/stat's utime + stime."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
