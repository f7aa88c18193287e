"""Verifying a stored addendum (`moecal check-reports`): its sidecar record is re-derived from the raw data it
names and compared, the text re-rendered from the record and compared, and the exported mlxcel CSV re-derived —
so an edited number in the prose, in the sidecar or in the CSV all fail. The one command that re-derives a
report's analysis on purpose.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from pathlib import Path

from harness.analysis.comparison.backend_defaults import build_defaults
from harness.analysis.decision.pipeline import Options
from harness.errors import InputError
from harness.json_input import load_json_object
from harness.output.addendum.addendum_markdown import render_markdown
from harness.output.addendum.report_build import build_report_data, read_report_input
from harness.output.addendum.report_data import ADDENDUM_SUFFIX, ReportData, read_sidecar, sidecar_path
from harness.output.defaults.defaults_addendum import DEFAULTS_SUFFIX, defaults_text
from harness.output.defaults.device_defaults import class_defaults, rust_block
from harness.output.mlxcel_source import MlxcelSource
from harness.output.report_files import mlxcel_csv
from harness.output.report_links import project_root
from harness.runs.safe_paths import outside_trees, plain_name_problem

OLD_BLOCK_START = "<!-- moecal-report\n"  # format 2 kept its record in the text; recognised to say "regenerate"


def verify_report(md_path: Path, trees: Sequence[Path] = ()) -> list[str] | None:
    """Problems with one stored addendum (empty: it checks out); None when it is not a moecal addendum.

    The sidecar names the raw data, and a sidecar is just a file someone committed: raw data is read only inside
    the addendum's project, the `trees` the user named, or the project moecal runs from (harness.runs.safe_paths), so a
    sidecar naming /etc/shadow is a problem line that names the path, never a read of it."""
    md_path = Path(md_path)
    text = md_path.read_text(encoding="utf-8")
    try:
        stored = read_sidecar(md_path)
    except InputError as exc:
        return [f"unreadable sidecar {sidecar_path(md_path).name}: {exc.field}: {exc.problem}"]
    if stored is None and md_path.name.endswith(DEFAULTS_SUFFIX):
        return _verify_defaults(md_path, text, trees)
    if stored is None:
        if text.startswith(OLD_BLOCK_START):
            return ["an addendum of the old format (its record inside the text): regenerate it with `moecal report`"]
        return _inserted_blocks(md_path, text, trees)
    root = project_root(md_path.parent)
    try:
        raw = root / stored["raw_data"]
        previous = root / stored["previous"]["raw_data"] if stored.get("previous") else None
        outside = outside_trees([raw, previous], _readable_trees(root, trees))
        # the CSV is read beside the addendum, by its name: the stored link may lead there through --link-base
        bad_name = stored["files"]["mlxcel_csv"] and plain_name_problem(Path(stored["files"]["mlxcel_csv"]).name)
        if outside or bad_name:
            return [outside or f"files.mlxcel_csv: {bad_name}"]
        record = ReportData.from_json(stored)
        report_input = read_report_input(raw, record.options, stored["mlxcel"], stored.get("overrides"))
        link_base = md_path.parent / record.link_base
        fresh = build_report_data(report_input, root, previous, record.date, md_path.parent, link_base).to_json()
        rendered = render_markdown(record)
        csv_name = record.files.mlxcel_csv
        # a summary has no runs to export: the sidecar's CSV cannot come from it (the differences below name why)
        runs = report_input.analysis.samples is not None
        csv_text = mlxcel_csv(report_input.analysis, record) if csv_name and runs else None
    except InputError as exc:
        return [f"cannot re-derive from the raw data: {exc}"]
    except (KeyError, TypeError) as exc:
        return [f"malformed sidecar {sidecar_path(md_path).name}: missing or wrong {exc}"]
    problems = _differences(stored, fresh, "")
    csv_path = md_path.parent / Path(csv_name).name if csv_name else None
    if csv_path is not None and csv_text is None:
        problems.append(
            f"{csv_name} exports runs its raw data ({stored['raw_data']}) does not hold: a summary has none"
        )
    elif csv_path is not None and (not csv_path.is_file() or csv_path.read_text(encoding="utf-8") != csv_text):
        problems.append(
            f"{csv_name} is missing or differs from the runs it exports: regenerate it with `moecal report`"
        )
    if text != rendered:
        problems.append(
            "the text differs from what its sidecar renders to (edited by hand, or written by another version): "
            "regenerate it with `moecal report`"
        )
    return problems


def _readable_trees(root: Path, trees: Sequence[Path]) -> list[Path]:
    """Where a sidecar's raw data may be read: the addendum's project, the folders named, and the project moecal
    runs from when it is one (not any folder, e.g. ~)."""
    here = project_root(Path.cwd())
    projects = [here] if any((here / marker).exists() for marker in (".git", "pyproject.toml")) else []
    return [root, *trees, *projects]


def _verify_defaults(md_path: Path, text: str, trees: Sequence[Path]) -> list[str] | None:
    """A several-runs defaults addendum (harness.output.defaults.defaults_addendum): its runs, named by its sidecar, are
    analysed again with the recorded options and the text and the Rust block beside it must come out the same.
    None: no moecal defaults sidecar beside it."""
    sidecar = md_path.with_name(md_path.name.removesuffix(".md") + ".json")
    if not sidecar.is_file():
        return None
    try:
        stored = load_json_object(sidecar)
    except InputError as exc:
        return [f"unreadable sidecar {sidecar.name}: {exc.field}: {exc.problem}"]
    if "moecal_defaults" not in stored:
        return None
    root = project_root(md_path.parent)
    stem = md_path.name.removesuffix(DEFAULTS_SUFFIX)
    try:
        runs = [root / run for run in stored["runs"]]
        outside = outside_trees(runs, _readable_trees(root, trees))
        if outside:
            return [outside]
        tree = stored["mlxcel"]
        source = (
            None
            if tree is None
            else MlxcelSource(dict(tree["caps"]), bool(tree["checked"]), tree["mlx_pin"], tree["version"], tree["path"])
        )
        defaults = build_defaults(runs, Options.from_settings(stored["options"]))
        fresh = defaults_text(
            defaults,
            stored["date"],
            stem,
            source,
            stored["patch"],
            stored["class_patch"],
            bool(stored.get("unreplicated")),
        )
    except InputError as exc:
        return [f"cannot re-derive from the raw data: {exc}"]
    except (KeyError, TypeError) as exc:
        return [f"malformed sidecar {sidecar.name}: missing or wrong {exc}"]
    problems = []
    if text != fresh:
        problems.append("the text differs from what its runs re-derive to: regenerate it with `moecal report RUN RUN…`")
    rust = md_path.with_name(f"{stem}-device-defaults.rs")
    if not rust.is_file() or rust.read_text(encoding="utf-8") != rust_block(class_defaults(defaults)):
        problems.append(f"{rust.name} is missing or differs from the classes its runs re-derive to")
    return problems


_BLOCK = re.compile(r"<!-- moecal:addendum (\S+) -->\r?\n(.*?)\r?\n<!-- /moecal:addendum \1 -->", re.DOTALL)


def _inserted_blocks(doc: Path, text: str, trees: Sequence[Path]) -> list[str] | None:
    """A design doc's `report --append-to` blocks (harness.output.addendum.design_doc): each must be its run's addendum
    as written beside its sidecar (which verify_report re-derives on its own), found under the doc's folder or the
    folders checked. None: the doc holds no block (not a moecal document)."""
    blocks = _BLOCK.findall(text)
    if not blocks:
        return None
    problems = []
    for run_id, body in blocks:
        name = f"{run_id}{ADDENDUM_SUFFIX}"
        found = next((p for folder in (doc.parent, *trees) for p in sorted(Path(folder).rglob(name))), None)
        if found is None:
            problems.append(f"the block of {run_id}: no {name} under {doc.parent} or the folders checked")
        elif found.read_text(encoding="utf-8").rstrip("\n").replace("\r\n", "\n") != body.replace("\r\n", "\n"):
            problems.append(f"the block of {run_id} differs from {found}: report the run again with --append-to")
    return problems


def _differences(stored: object, fresh: object, where: str) -> list[str]:
    """Recursive comparison; numbers agree within 1e-4 relative (floating-point noise across platforms)."""
    if isinstance(stored, dict) and isinstance(fresh, dict):
        out = [f"{where}.{k}: missing in one of them" for k in sorted(set(stored) ^ set(fresh))]
        for key in sorted(set(stored) & set(fresh)):
            out += _differences(stored[key], fresh[key], f"{where}.{key}")
        return out
    if isinstance(stored, list) and isinstance(fresh, list):
        if len(stored) != len(fresh):
            return [f"{where}: {len(stored)} entries stored, {len(fresh)} re-derived"]
        return [
            d for i, (a, b) in enumerate(zip(stored, fresh, strict=True)) for d in _differences(a, b, f"{where}[{i}]")
        ]
    numbers = (int, float)
    if isinstance(stored, numbers) and isinstance(fresh, numbers) and not isinstance(stored, bool):
        if math.isclose(stored, fresh, rel_tol=1e-4, abs_tol=1e-9):
            return []
    elif stored == fresh:
        return []
    return [f"{where.lstrip('.')}: stored {stored!r}, re-derived {fresh!r}"]
