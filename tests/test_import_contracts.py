"""The layering rules (pyproject.toml's [tool.importlinter], run by `make lint`) hold for the
source, and the module-circle contract (tools/import_contracts.py) finds the circles that only a
TYPE_CHECKING block, an import inside a function or a package's __init__ closes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import grimp
import pytest

ROOT = Path(__file__).resolve().parents[1]
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def test_the_source_keeps_every_import_contract() -> None:
    run = subprocess.run([str(LINT_IMPORTS), "--no-cache", "--no-logo"], cwd=ROOT, capture_output=True,
                         text=True, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "0 broken" in run.stdout


FIXTURE = {
    "__init__.py": "",
    # closed only for the type checker
    "a.py": "from typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n    from .b import B\n\nA = 1\n",
    "b.py": "from .a import A\n\nB = A\n",
    # closed only when f runs
    "c.py": "def f() -> int:\n    from .d import D\n    return D\n\nC = 1\n",
    "d.py": "from .c import C\n\nD = C\n",
    # a package and its own module
    "sub/__init__.py": "from .child import Z\n\nW = 1\n",
    "sub/child.py": "from . import W\n\nZ = W\n",
    # no circle: imports into one, none back
    "e.py": "from .a import A\nfrom .sub import child\n",
}


def test_circles_through_type_checking_functions_and_a_package_init_are_found(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name, text in FIXTURE.items():
        path = tmp_path / "circles_fixture" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.syspath_prepend(str(ROOT))
    from tools.import_contracts import module_cycles

    graph = grimp.build_graph("circles_fixture", cache_dir=None)
    cycles = module_cycles(graph, set(graph.modules))
    p = "circles_fixture"
    assert sorted(cycles) == [
        [f"{p}.a", f"{p}.b", f"{p}.a"],
        [f"{p}.c", f"{p}.d", f"{p}.c"],
        [f"{p}.sub", f"{p}.sub.child", f"{p}.sub"],
    ]
