"""Size figures for a restructuring's before/after note: lines per module of the chosen packages, the largest
functions of one module with their parameter counts, and how many `dict[str, object]` annotations the package holds.

    python scripts/code_metrics.py [--packages harness/analysis harness/output] [--module harness/analysis/decision.py]

Why a script: the numbers of a closing note must come from a command a reader can re-run on either tree.
"""

from __future__ import annotations

import argparse
import ast
from pathlib import Path


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--packages", nargs="+", default=["harness/analysis", "harness/output"])
    parser.add_argument("--module", nargs="+", default=["harness/analysis/decision.py"])
    parser.add_argument("--top", type=int, default=10)
    args = parser.parse_args()
    print("module sizes (lines):")
    for path, lines in module_sizes([Path(p) for p in args.packages]):
        print(f"  {lines:5d}  {path}")
    print(f"largest functions of {' '.join(args.module)} (lines, parameters):")
    for name, lines, params in largest_functions([Path(p) for p in args.module if Path(p).exists()], args.top):
        print(f"  {lines:5d}  {params:2d}  {name}")
    print(f"dict[str, object] annotations in harness/: {dict_object_count(Path('harness'))}")


if __name__ == "__main__":
    main()
