"""The house: one room per job. Walks every module's imports (lazy ones inside functions included) and
checks the layering of docs/ARCHITECTURE.md: dependencies point down, a pillar never imports another, no
package-level import cycle, no module over 500 lines, one validation package and one CLI package."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "windtunnel"

# Rooms by layer, lowest first; a room may import rooms of its own layer or below (never above).
LAYERS: list[set[str]] = [
    {"specs"},
    {"engine", "search", "graph", "cost", "profile"},
    {"train", "infer", "avail"},  # the three pillars
    {"api", "insight", "serve_avail", "job", "validation", "calibrate", "profiling", "report"},
    {"cli", "demo", "__init__", "__main__"},
]
PILLARS = {"train", "infer", "avail"}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _room(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _imports(path: Path) -> set[str]:
    module = _module_name(path)
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".")
                base = base if path.name == "__init__.py" else base[:-1]
                base = base[:len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            names = [target] + [f"{target}.{alias.name}" for alias in node.names]
            found.update(n for n in names if n.startswith("windtunnel."))
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("windtunnel."))
    return found


def _room_edges() -> dict[str, set[str]]:
    rooms = {p.stem if p.parent == PACKAGE else p.relative_to(PACKAGE).parts[0] for p in PACKAGE.rglob("*.py")}
    edges: dict[str, set[str]] = defaultdict(set)
    for path in PACKAGE.rglob("*.py"):
        source = _room(_module_name(path))
        for target in _imports(path):
            room = _room(target)
            if room in rooms and room != source:
                edges[source].add(room)
    return edges


def _layer(room: str) -> int:
    for level, rooms in enumerate(LAYERS):
        if room in rooms:
            return level
    raise AssertionError(f"room '{room}' is in no layer of tests/test_architecture.py: place it")


def test_every_room_has_a_layer():
    for path in PACKAGE.rglob("*.py"):
        _layer(_room(_module_name(path)))


def test_dependencies_point_down():
    upward = [f"{a} -> {b}" for a, targets in _room_edges().items() for b in targets if _layer(b) > _layer(a)]
    assert upward == [], f"imports that point up a layer: {upward}"


def test_no_pillar_imports_another():
    crossing = [f"{a} -> {b}" for a, targets in _room_edges().items() if a in PILLARS
                for b in targets if b in PILLARS]
    assert crossing == [], f"a pillar imports another (combine them in api.py): {crossing}"


def test_no_import_cycle_between_rooms():
    edges = _room_edges()
    state: dict[str, int] = {}

    def visit(room: str, trail: list[str]) -> None:
        state[room] = 1
        for target in sorted(edges.get(room, ())):
            if state.get(target) == 1:
                pytest.fail(f"import cycle: {' -> '.join(trail + [room, target])}")
            if state.get(target) is None:
                visit(target, trail + [room])
        state[room] = 2

    for room in sorted(edges):
        if room not in state:
            visit(room, [])


def test_no_module_over_500_lines():
    long = {str(p.relative_to(PACKAGE)): n for p in PACKAGE.rglob("*.py")
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > 500}
    assert long == {}, f"modules over 500 lines (split them): {long}"


def test_one_validation_package_and_one_cli_package():
    strays = [str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*.py")
              if ("validation" in p.stem and p.relative_to(PACKAGE).parts[0] not in ("validation", "specs"))
              or (p.stem.startswith("cli") and p.parent == PACKAGE)]
    assert strays == [], f"validators belong in windtunnel/validation/, commands in windtunnel/cli/: {strays}"
    assert (PACKAGE / "validation" / "training.py").exists() and (PACKAGE / "validation" / "inference.py").exists()
    assert (PACKAGE / "cli" / "__main__.py").exists()


def test_the_walker_sees_lazy_imports():
    """The checks above are only as good as the walker: an import inside a function counts."""
    # windtunnel.api imports the serving pillar inside __getattr__ only (lazily, for start-up time).
    assert "windtunnel.infer.api" in _imports(PACKAGE / "api.py")
    assert "infer" in _room_edges()["api"]
