"""The package's layering, checked from the source: imports run one way, no cycles, no private reach-ins.

Layers (lower may not import higher)::

    estimate  <  configs  <  runtime  <  {advise, data, measure, trace, validate}  <  report  <  integrations  <  cli

``estimate`` never imports torch (a subprocess test with torch blocked checks the import itself).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "memfit"

RANK = {"errors": 0, "units": 0, "files": 0, "estimate": 1, "configs": 2, "runtime": 3, "advise": 4, "data": 4,
        "measure": 4, "trace": 4, "validate": 5, "report": 6, "api": 7, "integrations": 7, "lab": 7, "cli": 8}


def _modules() -> dict[str, Path]:
    out = {}
    for path in SRC.rglob("*.py"):
        rel = path.relative_to(SRC.parent).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    assert len(out) > 50, f"found only {len(out)} modules under {SRC}: the test would pass vacuously"
    return out


def _imports(path: Path, module: str) -> list[tuple[str, list[str], int]]:
    """(imported module, names, line) for every import in ``path``, relative ones resolved."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(a.name, [], node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
            found.append((base, [a.name for a in node.names], node.lineno))
    return found


def _layer(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def test_layers_import_one_way() -> None:
    bad = []
    for module, path in _modules().items():
        src = _layer(module)
        for target, _names, line in _imports(path, module):
            if not target.startswith("memfit.") or src not in RANK:
                continue
            dst = _layer(target)
            if dst in RANK and dst != src and RANK[dst] > RANK[src]:
                bad.append(f"{path.relative_to(SRC)}:{line}: {src} imports {target}")
    assert not bad, "\n".join(bad)


def test_no_private_name_crosses_a_layer() -> None:
    bad = []
    for module, path in _modules().items():
        for target, names, line in _imports(path, module):
            if not target.startswith("memfit.") or _layer(target) == _layer(module):
                continue
            private = [n for n in names if n.startswith("_") and not n.startswith("__")]
            private += [p for p in target.split(".")[1:] if p.startswith("_") and not p.startswith("__")]
            if private:
                bad.append(f"{path.relative_to(SRC)}:{line}: {target} {private}")
    assert not bad, "\n".join(bad)


def test_no_module_import_cycle() -> None:
    """No import cycle between modules (function-level imports included). A package's ``__init__`` importing
    its own submodules is a re-export, not a concept depending on another: those edges are left out, so any
    cycle left is real, and a depth-first search finds one (a back edge) whatever order it visits in."""
    mods = _modules()
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for module, path in mods.items():
        is_package = path.name == "__init__.py"
        for target, names, _line in _imports(path, module):
            submodules = [f"{target}.{n}" for n in names if f"{target}.{n}" in mods]
            cands = submodules + ([target] if len(submodules) < len(names) or not names else [])
            for cand in cands:
                if cand in mods and cand != module and not (is_package and cand.startswith(module + ".")):
                    graph[module].add(cand)
    cycles = []
    state: dict[str, int] = {}

    def visit(node: str, stack: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                cycles.append(" -> ".join(stack[stack.index(nxt):] + [nxt]))
            elif nxt not in state:
                visit(nxt, stack + [nxt])
        state[node] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m, [m])
    assert not cycles, "\n".join(sorted(set(cycles)))


@pytest.mark.parametrize("limit", [450])
def test_no_source_file_is_too_long(limit: int) -> None:
    long = {str(p.relative_to(SRC)): n for p in SRC.rglob("*.py")
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > limit}
    assert not long, long


def test_model_type_names_live_in_the_registry() -> None:
    hits = []
    for path in SRC.rglob("*.py"):
        if "architectures" in path.parts or path.name == "architectures.py":
            continue
        for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if "model_type ==" in line or "model_type in (" in line or "model_type not in (" in line:
                hits.append(f"{path.relative_to(SRC)}:{i}: {line.strip()}")
    assert not hits, "\n".join(hits)
