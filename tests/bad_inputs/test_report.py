"""Bad inputs of `moecal report`: hostile names, mlxcel trees, switch layers and design-doc markers."""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

import pytest

from tests.bad_inputs.corpus import assert_case, one_error_line, synthetic_run
from tests.support.helpers import cli
from tests.support.synthetic_sweeps import (
    linear_curve,
    synthetic_samples,
    write_run,
)

# Hostile user strings: not errors, but they must reach the addendum and the plot as text, never as structure.
HOSTILE_NAMES = [
    ("pipe", "model|with|pipes"),
    ("newline", "model\n### injected heading"),
    ("html", "<img src=x onerror=alert(1)>"),
    ("mathtext", "$x$ and $y$"),
]


def _table_cells(line: str) -> int:
    """Cells of a markdown table row, counting only unescaped `|`."""
    return len([i for i, c in enumerate(line) if c == "|" and (i == 0 or line[i - 1] != "\\")]) - 1


def _mlxcel_tree(root: Path, metal: str) -> Path:
    (root / "src" / "models").mkdir(parents=True)
    text = f"const FUSED_MOE_MAX_DFF_METAL: i32 = {metal};\nconst FUSED_MOE_MAX_DFF_CUDA: i32 = 8192;\n"
    (root / "src" / "models" / "switch_layers.rs").write_text(text)
    return root


OPEN, CLOSE = "<!-- moecal:addendum run -->", "<!-- /moecal:addendum run -->"


def _defaults_report(tmp_path, edit):
    """`report` of a SYNTHETIC metal and cuda run against a SYNTHETIC mlxcel tree whose switch_layers.rs `edit`
    rewrote (bytes → bytes); returns (the finished command, the tree)."""
    from harness.output.mlxcel_source import SWITCH_LAYERS
    from tests.output.defaults.test_device_defaults import _run, fixture_tree
    from tests.support.helpers import cli

    (tmp_path / "pyproject.toml").write_text("")
    tree = fixture_tree(tmp_path / "mlxcel")
    switch = tree / SWITCH_LAYERS
    switch.write_bytes(edit(switch.read_bytes()))
    build = {"mlxcel_commit": "2fcdbe5f", "mlx_commit": "81ba1c6a"}
    metal = _run(tmp_path / "results" / "m3", "metal", "Apple M3 Max", 5000, 4096, build)
    cuda = _run(tmp_path / "results" / "gb10", "cuda", "NVIDIA GB10", 11000, 8192, build)
    return cli("report", metal, cuda, "--out", tmp_path / "reports", "--mlxcel-src", tree, cwd=tmp_path), tree


def _marked(*parts: str):
    from harness.output.defaults.device_defaults import BEGIN, END

    text = "\n".join({"B": BEGIN, "E": END}.get(p, p) for p in parts) + "\n"
    return lambda source: source + text.encode()


# (id, argv with {ws}, {config} and {out} placeholders, exit code, text the one error line must contain)
CASES = [
    ("report-over-foreign", ["report", "{ws}/good", "--out", "{ws}/reports"], 2, "holds the addendum of elsewhere"),
]


@pytest.mark.parametrize(("argv", "code", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_is_one_error_line(ws, outside, tmp_path, argv, code, expected):
    """`{out}` is the case's own output folder (a fresh tmp folder): everything else must stay as it was."""
    assert_case(ws, outside, tmp_path, argv, code, expected)


@pytest.mark.parametrize("name", [h[1] for h in HOSTILE_NAMES], ids=[h[0] for h in HOSTILE_NAMES])
def test_a_hostile_name_stays_text_in_the_addendum_and_the_plot(tmp_path, monkeypatch, name):
    import matplotlib.cbook
    import matplotlib.figure
    import matplotlib.text

    from harness.output.report_files import write_report

    samples = synthetic_samples(linear_curve([1024, 4096, 8192], 5000), seed=7, workload="command")
    samples["model"] = name  # every SYNTHETIC point carries the hostile model name
    meta = {"host": name, "backend": "cpu", "library_pin": name, "workload": "command", "arms": {"fused": name}}
    run = write_run(tmp_path / "run", samples, meta)
    labels: list[str] = []
    save = matplotlib.figure.Figure.savefig

    def capture(fig, *args, **kwargs):
        labels.extend(t.get_text() for t in fig.findobj(matplotlib.text.Text))
        return save(fig, *args, **kwargs)

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", capture)
    md_path, _, _, _ = write_report(run, tmp_path / "out")
    body = md_path.read_text()
    assert body.count("\n#") == 0 and body.startswith("### ")  # one heading, nothing injected
    prose = re.sub(r"`[^`]*`", "", body)  # inside a code span HTML and `$` are inert (CommonMark)
    assert "<img" not in prose and "$x$" not in prose
    rows = [line for line in body.splitlines() if line.startswith("|")]
    assert rows and len({_table_cells(line) for line in rows}) == 1  # a name never adds or splits a cell
    assert labels and not any(matplotlib.cbook.is_math_text(label) for label in labels)
    shown = name.replace("\n", " ").replace("$", "\\$")  # one line, `$` escaped: mathtext shows it as typed
    assert any(shown in label for label in labels)


def test_switch_layers_with_a_5000_digit_cap_or_a_fifo(tmp_path):
    run = synthetic_run(tmp_path, "run", [1024, 4096, 8192])
    huge = _mlxcel_tree(tmp_path / "huge", "9" * 5000)
    one_error_line(cli("report", run, "--out", tmp_path / "r1", "--mlxcel-src", huge), "(5000 digits) is not a cap")
    fifo = tmp_path / "fifo"
    (fifo / "src" / "models").mkdir(parents=True)
    os.mkfifo(fifo / "src" / "models" / "switch_layers.rs")
    started = time.monotonic()
    one_error_line(cli("report", run, "--out", tmp_path / "r2", "--mlxcel-src", fifo), "not a regular file")
    assert time.monotonic() - started < 30


def test_a_fifo_in_an_mlxcel_tree_is_skipped_and_never_blocks(tmp_path):
    import os
    import threading

    from harness.config.mlxcel_tree import derive
    from tests.measure.test_mlxcel_families import _tree

    tree = _tree(tmp_path / "mlxcel")
    os.mkfifo(tree / "src" / "models" / "stuck.rs")
    result = {}
    worker = threading.Thread(target=lambda: result.update(derived=derive(tree)), daemon=True)
    worker.start()
    worker.join(20)
    assert "derived" in result, "reading the tree blocked on a FIFO"
    assert result["derived"][0].families["mixtral"].wiring == "cap"


@pytest.mark.parametrize(
    ("head", "expected"),
    [
        ("ref: ../../outside", ""),
        ("ref: refs/../../../outside", ""),
        ("ref: refs/heads/main", "0123456789ab"),
        ("0123456789abcdef0123456789abcdef01234567", "0123456789ab"),
        ("not a commit at all", ""),
    ],
)
def test_git_head_is_never_followed_outside_the_tree(tmp_path, head, expected):
    from harness.config.mlxcel_tree import tree_pin

    root = tmp_path / "tree" / "mlxcel"
    (root / ".git" / "refs" / "heads").mkdir(parents=True)
    (root / ".git" / "refs" / "heads" / "main").write_text("0123456789abcdef0123456789abcdef01234567\n")
    (root / ".git" / "HEAD").write_text(head + "\n")
    (tmp_path / "tree" / "outside").write_text("SECRET-CONTENT-OUTSIDE\n")
    (tmp_path / "outside").write_text("SECRET-CONTENT-OUTSIDE\n")
    pin = tree_pin(root)
    assert "SECRET" not in pin and pin == " ".join(p for p in ("mlxcel", expected) if p) + f" (tree {root})"


@pytest.mark.parametrize(
    "markers",
    [
        f"{OPEN}\nx\n{CLOSE}\n{OPEN}\ny\n{CLOSE}",
        f"{CLOSE}\nx\n{OPEN}",
        f"{OPEN}\nhalf",
        "other\n<!-- moecal:addendum b -->",
    ],
)
def test_append_to_a_doc_with_broken_markers_writes_nothing(tmp_path, markers):
    run = write_run(tmp_path / "run", synthetic_samples(linear_curve([1024, 4096, 8192], 5000), seed=6))
    doc = tmp_path / "design.md"
    doc.write_text(f"# Design\n\n{markers}\n")
    before = doc.read_text()
    done = cli("report", run, "--out", tmp_path / "reports", "--append-to", doc)
    one_error_line(done, "not one opening and one closing comment")
    assert not (tmp_path / "reports").exists() and doc.read_text() == before


def test_a_marker_pair_shown_in_a_code_fence_is_not_replaced():
    from harness.output.addendum.design_doc import insert_addendum

    example = f"Mark a run like this:\n\n```markdown\n{OPEN}\n(the addendum)\n{CLOSE}\n```\n"
    text, replaced = insert_addendum(f"# Design\n\n{example}", "### New\n", "run")
    assert not replaced and example in text and text.endswith(f"{OPEN}\n### New\n{CLOSE}\n")
    again, replaced = insert_addendum(text, "### Newer\n", "run")
    assert replaced and example in again and "### Newer" in again and "### New\n" not in again


@pytest.mark.parametrize(
    "edit",
    [
        _marked("B", "fn x() {}", "E", "B", "fn y() {}", "E"),  # doubled
        _marked("E", "fn x() {}", "B"),  # reversed
        _marked("B", "fn x() {}"),  # half
        lambda source: source + b"pub(crate) fn fused_moe_max_dff_for_class(c: &str) -> Option<i32> { None }\n",
    ],
    ids=["doubled", "reversed", "half", "unmarked-copy"],
)
def test_a_switch_layers_with_odd_markers_is_refused_and_nothing_written(tmp_path, edit):
    done, _ = _defaults_report(tmp_path, edit)
    one_error_line(done, "moecal markers")
    assert not (tmp_path / "reports").exists()


def test_a_crlf_switch_layers_gets_a_patch_that_applies(tmp_path):
    import subprocess

    from harness.output.defaults.device_defaults import BEGIN
    from harness.output.mlxcel_source import SWITCH_LAYERS

    done, tree = _defaults_report(tmp_path, lambda source: source.replace(b"\r\n", b"\n").replace(b"\n", b"\r\n"))
    assert done.returncode == 0, done.stderr
    (patch,) = (tmp_path / "reports").glob("*-device-defaults.diff")
    subprocess.run(["git", "init", "-q", str(tree)], check=True)
    subprocess.run(["git", "-C", str(tree), "apply", str(patch)], check=True, capture_output=True)
    patched = (tree / SWITCH_LAYERS).read_bytes()
    assert BEGIN.encode() + b"\r\n" in patched and b"\n" not in patched.replace(b"\r\n", b"")
