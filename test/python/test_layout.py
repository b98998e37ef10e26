"""The source tree keeps its layering: no import cycle in python/, no module importing another's private name.

Read from the sources (every relative import, at module level or inside a
function), so a cycle that only a late import would hide still fails here.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Dict, List, Set

ROOT = Path(__file__).resolve().parents[2] / "python" / "gqa_torch_mlir"


def modules() -> Dict[str, Path]:
    found = {}
    for path in ROOT.rglob("*.py"):
        parts = path.relative_to(ROOT.parent).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def relative_imports(name: str, path: Path):
    """``(target module, imported name)`` for each relative import of the module."""
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level:
            base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
            target = ".".join(base + ([node.module] if node.module else []))
            for alias in node.names:
                yield target, alias.name


def import_graph(found: Dict[str, Path]) -> Dict[str, Set[str]]:
    edges: Dict[str, Set[str]] = {m: set() for m in found}
    for name, path in found.items():
        for target, imported in relative_imports(name, path):
            module = f"{target}.{imported}" if f"{target}.{imported}" in found else target
            if module in found and not module.startswith(name + "."):  # a package importing its own parts is no cycle
                edges[name].add(module)
    return edges


def cycles(edges: Dict[str, Set[str]]) -> List[List[str]]:
    state: Dict[str, int] = {}
    found: List[List[str]] = []

    def visit(module: str, path: List[str]) -> None:
        state[module] = 1
        for nxt in sorted(edges[module]):
            if state.get(nxt) == 1:
                found.append(path[path.index(nxt):] + [nxt] if nxt in path else path + [nxt])
            elif nxt not in state:
                visit(nxt, path + [nxt])
        state[module] = 2

    for module in sorted(edges):
        if module not in state:
            visit(module, [module])
    return found


def test_no_import_cycle():
    assert cycles(import_graph(modules())) == []


def test_no_module_imports_a_private_name_of_another():
    found = modules()
    private = [
        f"{name} imports {target}.{imported}"
        for name, path in found.items()
        for target, imported in relative_imports(name, path)
        if imported.startswith("_") and f"{target}.{imported}" not in found  # a _module itself may be imported
    ]
    assert private == []
