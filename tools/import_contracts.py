"""An import-linter contract of ferrymq's own: no import circle between any two modules of the
packages named, counting every import grimp sees (TYPE_CHECKING blocks and imports inside
functions too).

import-linter's acyclic_siblings contract compares siblings only, so it misses a package's
__init__ and one of its own modules importing each other; this one works on the module graph
itself. pyproject.toml registers it (contract_types) and `make lint` runs it."""

from __future__ import annotations

from collections import deque
from itertools import pairwise

import grimp
from importlinter.application import output
from importlinter.domain import fields
from importlinter.domain.contract import Contract, ContractCheck


def module_cycles(graph: grimp.ImportGraph, modules: set[str]) -> list[list[str]]:
    """One shortest circle through each strongly connected set of `modules` (Tarjan's algorithm,
    iterative: the graph may be deeper than Python's recursion limit)."""
    edges = {m: sorted(graph.find_modules_directly_imported_by(m) & modules) for m in sorted(modules)}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []
    for root in edges:
        if root in index:
            continue
        work = [(root, 0)]
        while work:
            node, i = work.pop()
            if i == 0:
                index[node] = low[node] = len(index)
                stack.append(node)
                on_stack.add(node)
            targets = edges[node]
            if i < len(targets):
                work.append((node, i + 1))
                nxt = targets[i]
                if nxt not in index:
                    work.append((nxt, 0))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1 or node in edges[node]:
                    components.append(sorted(component))
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
    return [_shortest_circle(edges, set(c)) for c in components]


def _shortest_circle(edges: dict[str, list[str]], component: set[str]) -> list[str]:
    start = min(component)
    came_from: dict[str, str] = {}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        for nxt in edges[node]:
            if nxt == start:
                path = [node]
                while path[-1] != start:
                    path.append(came_from[path[-1]])
                return [*reversed(path), start]
            if nxt in component and nxt not in came_from:
                came_from[nxt] = node
                queue.append(nxt)
    raise AssertionError(f"{start} is on no circle of its component")


class AcyclicModulesContract(Contract):
    type_name = "acyclic_modules"

    packages = fields.ListField(subfield=fields.StringField())

    def check(self, graph: grimp.ImportGraph, verbose: bool) -> ContractCheck:
        modules: set[str] = set()
        for package in self.packages:  # type: ignore[attr-defined]
            modules |= {package} | graph.find_descendants(package)
        cycles = module_cycles(graph, modules)
        details = [
            [graph.get_import_details(importer=a, imported=b) for a, b in pairwise(c)]
            for c in cycles
        ]
        return ContractCheck(kept=not cycles, metadata={"cycles": cycles, "details": details})

    def render_broken_contract(self, check: ContractCheck) -> None:
        for cycle, hops in zip(check.metadata["cycles"], check.metadata["details"], strict=True):
            output.print_error(f"{cycle[0]} is on an import circle:")
            for (importer, imported), found in zip(pairwise(cycle), hops, strict=True):
                where = ", ".join(f"l.{d['line_number']}" for d in found)
                output.print_error(f"  {importer} -> {imported} ({where})", bold=False)
            output.new_line()
