"""Size figures for a restructuring's before/after note: lines per module of the chosen packages, the largest
functions of one module with their parameter counts, how many `dict[str, object]` annotations the package holds, and
each package's rooms (a sub-package or a module directly in it), the import arrows between them and their floors.

    python scripts/code_metrics.py [--packages harness/analysis harness/output] [--module
    harness/analysis/decision/decide.py]

Why a script: the numbers of a closing note must come from a command a reader can re-run on either tree.
"""

from __future__ import annotations

import argparse
import ast
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root: tests.test_layers
from tests.test_layers import _imports  # noqa: E402  the layer test's own reading of the imports: the two agree


def module_sizes(packages: list[Path]) -> list[tuple[str, int]]:
    """(path, line count) of every module under the packages, largest first."""
    rows = [(str(p), len(p.read_text().splitlines())) for pkg in packages for p in sorted(pkg.rglob("*.py"))]
    return sorted(rows, key=lambda r: -r[1])


def largest_functions(paths: list[Path], top: int) -> list[tuple[str, int, int]]:
    """(qualified name, lines, parameters) of the `top` longest functions defined in the given modules."""
    rows = []
    for path in paths:
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                a = node.args
                params = len(a.posonlyargs) + len(a.args) + len(a.kwonlyargs) + bool(a.vararg) + bool(a.kwarg)
                rows.append((f"{path.stem}.{node.name}", node.end_lineno - node.lineno + 1, params))
    return sorted(rows, key=lambda r: -r[1])[:top]


def dict_object_count(root: Path) -> int:
    """Occurrences of the loose record annotation `dict[str, object]` in the package's source."""
    return sum(p.read_text().count("dict[str, object]") for p in root.rglob("*.py"))


def rooms(package: Path) -> tuple[int, int, int]:
    """(rooms, floors, arrows) of one package: a room is a sub-package or a module directly in it (its __init__
    aside), an arrow a pair of rooms of which one imports the other, a floor one step of the longest chain of arrows
    (floor 1 imports no other room). How a restructuring reads to a newcomer: fewer rooms and arrows, fewer floors."""
    dotted = ".".join(package.parts)
    graph: dict[str, set[str]] = {}
    for me, edges in _imports().items():
        if not me.startswith(dotted + "."):
            continue
        room = me.removeprefix(dotted + ".").split(".")[0]
        graph.setdefault(room, set()).update(
            t.removeprefix(dotted + ".").split(".")[0] for t, _ in edges if t.startswith(dotted + ".")
        )
    for room, targets in graph.items():
        targets.discard(room)

    floors: dict[str, int] = {}

    def floor(room: str, path: tuple[str, ...] = ()) -> int:
        if room in path:  # rooms that import each other have no floor: name the circle
            sys.exit(f"code_metrics: rooms of {package} in a circle: {' → '.join((*path[path.index(room) :], room))}")
        if room not in floors:
            floors[room] = 1 + max((floor(t, (*path, room)) for t in graph[room] if t in graph), default=0)
        return floors[room]

    return len(graph), max(map(floor, graph), default=0), sum(len(t) for t in graph.values())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--packages", nargs="+", default=["harness/analysis", "harness/output"])
    parser.add_argument("--module", nargs="+", default=["harness/analysis/decision/decide.py"])
    parser.add_argument("--top", type=int, default=10)
    args = parser.parse_args()
    print("module sizes (lines):")
    for path, lines in module_sizes([Path(p) for p in args.packages]):
        print(f"  {lines:5d}  {path}")
    print(f"largest functions of {' '.join(args.module)} (lines, parameters):")
    for name, lines, params in largest_functions([Path(p) for p in args.module if Path(p).exists()], args.top):
        print(f"  {lines:5d}  {params:2d}  {name}")
    print(f"dict[str, object] annotations in harness/: {dict_object_count(Path('harness'))}")
    print("rooms (sub-packages and modules directly in the package), floors, arrows between rooms:")
    for package in args.packages:
        count, floors, arrows = rooms(Path(package))
        print(f"  {package}: {count} rooms on {floors} floors, {arrows} arrows")


if __name__ == "__main__":
    main()
