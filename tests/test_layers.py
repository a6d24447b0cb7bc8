"""The package's layering: every import goes to the importer's own floor or one below it, and no two files import
each other, directly or round a circle. The floors follow the data (README "Layout")."""
from __future__ import annotations

import ast
from pathlib import Path

import evolve

PACKAGE = Path(evolve.__file__).parent

#: Floors from the ground up: a module imports only from its own floor or a lower one.
FLOORS = [
    {"evolve", "evolve.data"},                          # ground: errors, numbers, canonical, files, ...
    {"evolve.strategy", "evolve.benchmarks"},
    {"evolve.runtime"},
    {"evolve.systems"},                                 # adapters of memory systems this project did not write
    {"evolve.observe"},
    {"evolve.verify"},
    {"evolve.state"},
    {"evolve.improve"},
    {"evolve.llm"},
    {"evolve.loop"},
    {"evolve.ops"},
    {"evolve.serve"},
    {"evolve.cli"},
]


def _module(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _room(module: str) -> str:
    """The folder a module belongs to: ``evolve.loop.engine`` -> ``evolve.loop``, ``evolve.errors`` -> ``evolve``."""
    parts = module.split(".")
    if len(parts) > 2 or (len(parts) == 2 and (PACKAGE / parts[1]).is_dir()):
        return ".".join(parts[:2])
    return "evolve"


def _floor(module: str) -> int:
    room = _room(module)
    return next(i for i, rooms in enumerate(FLOORS) if room in rooms)


def _imports() -> dict[str, set[str]]:
    """Each module's imports of package modules (``import evolve.x`` and ``from evolve.x import y``)."""
    modules = {_module(p): p for p in PACKAGE.rglob("*.py")}
    out: dict[str, set[str]] = {}
    for name, path in modules.items():
        found = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets = []
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                targets = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            found |= {t for t in targets if t in modules and t != name and t.startswith("evolve")}
        out[name] = found
    return out


def test_every_folder_has_a_floor():
    rooms = {_room(_module(p)) for p in PACKAGE.rglob("*.py")}
    assert rooms <= set().union(*FLOORS), sorted(rooms - set().union(*FLOORS))


def test_no_import_runs_up_a_floor():
    upward = sorted(f"{a} -> {b}" for a, targets in _imports().items() for b in targets
                    if b != "evolve" and _floor(b) > _floor(a))
    assert upward == []


def test_no_circles():
    """No module reaches itself through its imports (a package's ``__init__``, a facade that re-exports its
    modules, is left out)."""
    packages = {_module(p) for p in PACKAGE.rglob("__init__.py")}
    graph = {m: targets - packages for m, targets in _imports().items() if m not in packages}
    circles = []
    for start in graph:
        seen, stack = set(), list(graph[start])
        while stack:
            node = stack.pop()
            if node == start:
                circles.append(start)
                break
            if node not in seen:
                seen.add(node)
                stack.extend(graph.get(node, ()))
    assert circles == []
