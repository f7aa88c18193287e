"""The package layers of docs/design.md §2, held against the code: every import (lazy and type-only ones included)
points down the layer order, and no module is part of an import circle. A change that needs an upward import
belongs in another package; the failure names the importing file and line."""

from __future__ import annotations

import ast
from pathlib import Path

HARNESS = Path(__file__).resolve().parents[1] / "harness"
# bottom to top; `base` is the package's own top-level modules (errors, thresholds)
LAYERS = ("base", "config", "runs", "devices", "analysis", "measure", "output", "cli")


def _module(path: Path) -> str:
    parts = path.relative_to(HARNESS.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _layer(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in LAYERS else "base"


def _imports() -> dict[str, list[tuple[str, int]]]:
    """module → every harness module it imports (an imported name that is a module counts as that module)."""
    modules = {_module(p) for p in HARNESS.rglob("*.py")}
    found: dict[str, list[tuple[str, int]]] = {}
    for path in sorted(HARNESS.rglob("*.py")):
        me = _module(path)
        edges = found.setdefault(me, [])
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                edges += [(a.name, node.lineno) for a in node.names if a.name in modules]
            elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("harness"):
                for alias in node.names:
                    target = f"{node.module}.{alias.name}"
                    edges.append((target if target in modules else node.module, node.lineno))
    return found


def test_every_import_points_down_the_layers() -> None:
    upward = [
        f"{me} ({_layer(me)}) imports {target} ({_layer(target)}), line {line}"
        for me, edges in _imports().items()
        if me != "harness.__main__"  # `python -m harness` is the command line itself
        for target, line in edges
        if LAYERS.index(_layer(target)) > LAYERS.index(_layer(me))
    ]
    assert upward == []


def test_no_module_is_in_an_import_circle() -> None:
    graph = {me: {t for t, _ in edges if t != me and not me.startswith(t + ".")} for me, edges in _imports().items()}
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    circle: list[str] = []

    def visit(node: str, path: list[str]) -> bool:
        state[node] = 1
        for target in sorted(graph.get(node, ())):
            if state.get(target) == 1:  # on the current path: an ancestor of `node` (self-imports are left out)
                circle.extend([*path[path.index(target) :], node, target])
                return True
            if state.get(target) is None and visit(target, [*path, node]):
                return True
        state[node] = 2
        return False

    assert not any(visit(m, []) for m in sorted(graph) if state.get(m) is None), " → ".join(circle)


# Inside analysis/ and output/, bottom to top: each room (a sub-package, or a module directly in the package) imports
# only rooms below it. A new module or sub-package is placed here by hand, where its imports put it.
ROOMS = {
    "harness.analysis": ("number_format", "evidence", "points", "decision", "rounds", "comparison"),
    "harness.output": (
        "markdown_text",
        "report_links",
        "bench_export",
        "mlxcel_source",
        "tables",
        "addendum",
        "plots",
        "defaults",
        "report_files",
        "report_check",
        "sweep_result",
    ),
}


def test_the_rooms_of_analysis_and_output_import_downward() -> None:
    """The sub-packages are there so a newcomer can place a module by its room (issue 40): one import up between
    rooms and they read as a corridor again. The failure names the importing module and line, or the room to place."""

    def room(package: str, module: str) -> str:
        return module.removeprefix(package + ".").split(".")[0]

    wrong = []
    for package, order in ROOMS.items():
        for me, edges in _imports().items():
            if not me.startswith(package + "."):
                continue
            mine = room(package, me)
            if mine not in order:
                wrong.append(f"{me}: room {mine} is not placed in ROOMS[{package!r}]")
                continue
            wrong += [
                f"{me} ({mine}) imports {target} ({room(package, target)}), line {line}"
                for target, line in edges
                if target.startswith(package + ".")
                and room(package, target) in order
                and order.index(room(package, target)) > order.index(mine)
            ]
    assert wrong == []
