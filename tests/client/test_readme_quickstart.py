"""The README's "From Python" quickstart, run as a script the way a newcomer saves and runs it:
it must show a message consumed and exit by itself, cleanly."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from conftest import Standalone
from ferrymq import AdminClient

README = Path(__file__).resolve().parents[2] / "README.md"


def quickstart_code() -> str:
    section = README.read_text().split("\nFrom Python:\n", 1)[1]
    found = re.search(r"```python\n(.*?)```", section, re.S)
    assert found, "the README's Python quickstart"
    return found.group(1)


def test_the_python_quickstart_runs_as_a_script(standalone: Standalone, tmp_path: Path) -> None:
    code = quickstart_code()
    assert "127.0.0.1:9876" in code
    AdminClient(standalone.namesrv).create_topic("orders", 4)  # the CLI quickstart's first step
    script = tmp_path / "quickstart.py"
    script.write_text(code.replace("127.0.0.1:9876", standalone.namesrv))
    run = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    lines = run.stdout.splitlines()
    assert lines[0].startswith("SendResult(status=<SendStatus.SEND_OK")
    assert re.fullmatch(r"consumed [0-9A-F]{32} b'\{\"id\": 1\}'", lines[1]), lines
    # Shut down cleanly: nothing logged at WARNING or above, no traceback.
    assert run.stderr == "", run.stderr[-2000:]
