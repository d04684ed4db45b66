"""The request processors reach the broker only through BrokerContext: none imports the
controller, so the controller can import them without a cycle."""

from __future__ import annotations

import ast
from pathlib import Path

import ferrymq.broker.processors as processors


def _imported_modules(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            names.add("." * node.level + (node.module or ""))
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
    return names


def test_processors_do_not_import_the_controller() -> None:
    package = Path(processors.__file__).parent
    modules = sorted(package.glob("*.py"))
    assert modules, "no processor modules found"
    offenders = {
        p.name: sorted(m for m in _imported_modules(p) if m.endswith("controller"))
        for p in modules
    }
    assert {name: found for name, found in offenders.items() if found} == {}


def test_only_the_put_pipeline_appends_to_the_store() -> None:
    """Every message a broker stores goes through broker/put.py (routing, the role gate, the
    replication wait, stats and events): no other module calls the store's put."""
    src = Path(processors.__file__).parents[3]
    callers = sorted(
        str(p.relative_to(src)) for p in src.rglob("*.py")
        if "store" not in p.relative_to(src).parts[:2]
        and any(isinstance(node, ast.Attribute) and node.attr in ("put_messages", "put_messages_async")
                for node in ast.walk(ast.parse(p.read_text())))
    )
    assert callers == ["ferrymq/broker/put.py"]
