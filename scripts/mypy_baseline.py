"""mypy for `make lint`: fail on any error that mypy-baseline.txt does not already list; `--write` rewrites the list.

    python scripts/mypy_baseline.py           check (make lint)
    python scripts/mypy_baseline.py --write   rewrite mypy-baseline.txt from today's errors (make mypy-baseline)

Which modules are strict is configured in pyproject.toml ([tool.mypy], by package pattern). The baseline holds the
errors the code had when the checker came in, so the check could start without fixing every module first; it may
only shrink. The strict packages have none left, and none may come back: an error in one of them is never matched by
a listed error (which names only a file name, so `__init__.py` of another package could otherwise match), and
`--write` refuses to list it. An error is matched by (file name, error code, message), without its line number or
folder (and without the lists of names mypy prints from a set, whose order changes from run to run): an edit
above it, or a module moved into another folder under the same name, leaves it matched. A renamed module's errors
read as new until the baseline is rewritten (after a move, with `make mypy-baseline`, checking the diff shows only
renamed paths). Each error is counted: a second copy of a listed error in the same file name is new.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tomllib
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BASELINE = REPO / "mypy-baseline.txt"
# `harness/analysis/decision/curve.py:12: error: Incompatible types ...  [assignment]`
ERROR = re.compile(r"^(?P<path>[^:\s]+\.pyi?):\d+(?::\d+)?: error: (?P<message>.*?)(?:  \[(?P<code>[a-z-]+)\])?$")
# a list of names mypy prints from a set, in an order (and, past five, a selection) that differs between runs:
# `Extra keys ("grid", "points") for TypedDict`, `expected one of ("model", "dff", ...)`
NAME_SET = re.compile(r'\("[^"()]*"(?:, "[^"()]*")*(?:, \.\.\.)?\)')
HEADER = (
    "# mypy errors accepted for now (scripts/mypy_baseline.py): path, code, message. It may only shrink; rewrite it\n"
    "# with `make mypy-baseline` after fixing errors or moving modules, never to hide a new error.\n"
)

Key = tuple[str, str, str]  # (file name, code, message)


def strict_folders(pyproject: Path = REPO / "pyproject.toml") -> tuple[str, ...]:
    """The folders pyproject.toml holds to the strict flags (`[[tool.mypy.overrides]]` with disallow_untyped_defs,
    module patterns `harness.analysis.*`): `harness/analysis/`, ..."""
    overrides = tomllib.loads(pyproject.read_text())["tool"]["mypy"].get("overrides", [])
    folders = []
    for override in overrides:
        if override.get("disallow_untyped_defs"):
            modules = override["module"]
            for module in [modules] if isinstance(modules, str) else modules:
                folders.append(module.removesuffix(".*").replace(".", "/") + "/")
    return tuple(folders)


def in_strict(error: tuple[str, str, str], folders: tuple[str, ...]) -> bool:
    return error[0].startswith(folders)


def run_mypy() -> tuple[list[tuple[str, str, str]], str]:
    """(path, code, message) of every error mypy reports for the configured files, and its full output. mypy's
    exit status 1 means errors found; anything else (2: a crash, a bad configuration) is no check at all."""
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--no-error-summary", "--no-pretty", "--show-error-codes"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode not in (0, 1):
        sys.exit(f"error: mypy: exit status {done.returncode}: {(done.stderr or done.stdout).strip()}")
    errors = []
    for line in done.stdout.splitlines():
        match = ERROR.match(line)
        if match:
            errors.append((match["path"], match["code"] or "", NAME_SET.sub("(...)", match["message"])))
    return errors, done.stdout


def key(error: tuple[str, str, str]) -> Key:
    path, code, message = error
    return Path(path).name, code, message


def read_baseline() -> list[tuple[str, str, str]]:
    if not BASELINE.exists():
        return []
    rows = []
    for line in BASELINE.read_text().splitlines():
        if line and not line.startswith("#"):
            path, code, message = line.split("\t", 2)
            rows.append((path, code, message))
    return rows


def unlisted(
    errors: list[tuple[str, str, str]], listed: list[tuple[str, str, str]], strict: tuple[str, ...]
) -> tuple[list[tuple[str, str, str]], int]:
    """The errors `listed` does not account for (each listed error accounts for one, matched by `key`; none in a
    strict folder), and how many listed errors are gone."""
    allowed = Counter(key(e) for e in listed)
    new = []
    for error in errors:
        if not in_strict(error, strict) and allowed[key(error)] > 0:
            allowed[key(error)] -= 1
        else:
            new.append(error)
    return new, sum(allowed.values())


def write_baseline(errors: list[tuple[str, str, str]]) -> None:
    BASELINE.write_text(HEADER + "".join(f"{p}\t{c}\t{m}\n" for p, c, m in sorted(errors)))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--write", action="store_true", help="rewrite mypy-baseline.txt from today's errors")
    args = parser.parse_args()
    errors, output = run_mypy()
    strict = strict_folders()
    if args.write:
        refused = [e for e in errors if in_strict(e, strict)]
        if refused:
            print("\n".join(f"{p}\t{c}\t{m}" for p, c, m in refused))
            print(f"mypy: {len(refused)} errors in the strict packages ({', '.join(strict)}): fix them, none is listed")
            return 1
        write_baseline(errors)
        print(f"mypy: {len(errors)} errors written to {BASELINE.name}")
        return 0
    new, fixed = unlisted(errors, read_baseline(), strict)
    if new:
        listed = set(new)
        for line in output.splitlines():  # mypy's own lines (with line numbers) of the errors that are new
            match = ERROR.match(line)
            if match and (match["path"], match["code"] or "", NAME_SET.sub("(...)", match["message"])) in listed:
                print(line)
        print(f"mypy: {len(new)} new errors (not in {BASELINE.name}); fix them, do not add them to the baseline")
        return 1
    note = f"; {fixed} listed errors are gone: `make mypy-baseline` shrinks the list" if fixed else ""
    print(f"mypy: no new errors ({len(errors)} known, in {BASELINE.name}){note}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
