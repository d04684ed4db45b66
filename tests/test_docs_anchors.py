"""docs/architecture.md names code by anchors, `ferrymq/<path>.py` or
`ferrymq/<path>.py:Name.attr` in backticks (paths under src/): each file must exist and each
name must be defined there (a module-level function, class or assignment, then a class's
method or attribute, read with ast), so a rename or a move that leaves the doc behind fails
here instead of rotting silently."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"
DOC = ROOT / "docs" / "architecture.md"

ANCHOR = re.compile(r"`(ferrymq/[A-Za-z0-9_/]+\.py)(?::([A-Za-z_][A-Za-z0-9_.]*))?`")


def anchors(text: str) -> list[tuple[str, str | None]]:
    return [(m.group(1), m.group(2)) for m in ANCHOR.finditer(text)]


def _names(body: list[ast.stmt]) -> dict[str, ast.AST]:
    """What a module or class body defines, by name: functions, classes, assignments (plain,
    annotated, several targets), including those under `if` / `try` at that level."""
    found: dict[str, ast.AST] = {}
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            found[node.name] = node
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                for name in ast.walk(target):
                    if isinstance(name, ast.Name):
                        found[name.id] = node
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            found[node.target.id] = node
        elif isinstance(node, ast.If):
            found.update(_names(node.body))
            found.update(_names(node.orelse))
        elif isinstance(node, ast.Try):
            for part in (node.body, node.orelse, node.finalbody, *(h.body for h in node.handlers)):
                found.update(_names(part))
    return found


def unresolved(path: str, qualname: str | None, src: Path = SRC) -> str | None:
    """Why the anchor does not resolve, or None when it does."""
    file = src / path
    if not file.is_file():
        return f"{path}: no such file under {src}"
    if qualname is None:
        return None
    node: ast.AST = ast.parse(file.read_text(), str(file))
    for i, part in enumerate(qualname.split(".")):
        if not isinstance(node, (ast.Module, ast.ClassDef)):
            return f"{path}:{qualname}: {'.'.join(qualname.split('.')[:i])} is not a class"
        found = _names(node.body).get(part)
        if found is None:
            where = "the module" if isinstance(node, ast.Module) else f"class {node.name}"
            return f"{path}:{qualname}: {part} is not defined in {where}"
        node = found
    return None


def test_every_anchor_of_the_architecture_doc_resolves() -> None:
    found = anchors(DOC.read_text())
    # The doc walks a message through the whole system: far fewer anchors means the pattern
    # stopped matching, not that the doc got shorter.
    assert len(found) >= 40, f"only {len(found)} anchors found in {DOC}"
    broken = [why for path, name in found if (why := unresolved(path, name)) is not None]
    assert not broken, "\n".join(broken)


FIXTURE = '''
import os

LIMIT: int = 3
A, B = 1, 2
if os.name:
    ON_POSIX = True


class Outer:
    size = 4

    async def run(self) -> None:
        def local() -> None: ...

    class Inner:
        def deep(self) -> None: ...


def helper() -> None: ...
'''


@pytest.mark.parametrize(("qualname", "ok"), [
    (None, True),
    ("helper", True),
    ("LIMIT", True),
    ("B", True),
    ("ON_POSIX", True),
    ("Outer", True),
    ("Outer.run", True),
    ("Outer.size", True),
    ("Outer.Inner.deep", True),
    ("Outer.missing", False),
    ("Outer.run.local", False),  # a function's locals are not anchors
    ("helper.x", False),
    ("missing", False),
    ("os", False),  # an import is not a definition
])
def test_anchors_resolve_to_definitions_only(tmp_path: Path, qualname: str | None, ok: bool) -> None:
    (tmp_path / "ferrymq").mkdir()
    (tmp_path / "ferrymq" / "mod.py").write_text(FIXTURE)
    assert (unresolved("ferrymq/mod.py", qualname, tmp_path) is None) is ok


def test_a_missing_file_does_not_resolve(tmp_path: Path) -> None:
    assert unresolved("ferrymq/gone.py", None, tmp_path) is not None
    assert unresolved("ferrymq/gone.py", "f", tmp_path) is not None


def test_the_pattern_reads_both_forms() -> None:
    text = ("see `ferrymq/broker/put.py:PutPipeline.put`, then `ferrymq/ha/slave.py`; "
            "not `put.py:x` nor ferrymq/bare.py:y")
    assert anchors(text) == [("ferrymq/broker/put.py", "PutPipeline.put"), ("ferrymq/ha/slave.py", None)]
