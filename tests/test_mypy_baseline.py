"""scripts/mypy_baseline.py, `make lint`'s mypy gate: the strict packages are read from pyproject.toml, keep no listed
error, and an error in one of them is never matched by a listed error of another folder with the same file name.
Runs no mypy (the script's matching on made-up error tuples; the baseline file as committed)."""

from __future__ import annotations

import importlib.util

from tests.support.helpers import REPO


def _script():
    spec = importlib.util.spec_from_file_location("mypy_baseline", REPO / "scripts" / "mypy_baseline.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_strict_packages_come_from_pyproject_and_the_baseline_lists_none_of_their_errors():
    script = _script()
    strict = script.strict_folders()
    assert set(strict) == {"harness/analysis/", "harness/output/", "harness/runs/"}
    assert [e for e in script.read_baseline() if script.in_strict(e, strict)] == []


def test_a_listed_error_matches_by_file_name_but_never_one_in_a_strict_package():
    script = _script()
    strict = ("harness/output/",)
    listed = [("harness/measure/workloads/__init__.py", "attr-defined", '"object" has no attribute "x"')]
    moved = ("harness/measure/__init__.py", "attr-defined", '"object" has no attribute "x"')  # same name elsewhere
    in_output = ("harness/output/__init__.py", "attr-defined", '"object" has no attribute "x"')
    assert script.unlisted([moved], listed, strict) == ([], 0)
    assert script.unlisted([in_output], listed, strict) == ([in_output], 1)
    assert script.unlisted([], listed, strict) == ([], 1)  # a listed error gone: counted, for the shrink note
    assert script.unlisted([moved, moved], listed, strict) == ([moved], 0)  # each listed error accounts for one
