"""Hardening v5 (issue 38): knobs that cannot poison a decision, moecal's own files always readable, odd inputs
(FIFOs, BOMs, markers) refused in one line before anything is written. Every input is SYNTHETIC, built in a tmp
folder; each refused case ends in one `error:` line with exit code 2 and no traceback."""

from __future__ import annotations

import json
import sys
import time

import pytest

from harness.config import knobs as launch_knobs
from tests.helpers import cli, fake_config
from tests.synthetic_sweeps import SYNTHETIC_META, linear_curve, synthetic_samples, write_run
from tests.test_bad_inputs_v4 import _one_error_line

# --- knobs: only the binary's launch knobs ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("MLXCEL_FUSED_MOE", "the kill switch"),
        ("MLXCEL_FUSED_MOE_MAX_DFF", "the cap itself"),
        ("MLXCEL_FUSED_MOE_PARITY_CHECK", "the parity probe"),
        ("MLXCEL_FUSED_MOE_PARITY_THRESHOLD", "the parity probe's threshold"),
        ("MLXCEL_FUSED_MOE_PARITY_CHECK_EVERY", "the parity probe"),
        ("MLXCEL_FUSED_MOE_SGV", "did you mean MLXCEL_FUSED_MOE_SGY?"),
        ("MLXCEL_NO_SUCH_THING", "is not a launch knob the binary reads"),
    ],
)
def test_a_knob_that_is_no_launch_knob_is_refused_before_anything_runs(tmp_path, name, expected):
    config = fake_config(tmp_path, knobs={name: [0, 1]})
    _one_error_line(cli("plan", config), expected)
    _one_error_line(cli("sweep", config, "--out", tmp_path / "run"), expected)
    assert not (tmp_path / "run").exists()


def test_six_knobs_of_32_values_are_refused_at_once(tmp_path):
    knobs = {f"MLXCEL_FUSED_MOE_SGY{'_' * i}": list(range(1, 33)) for i in range(6)}
    started = time.monotonic()
    _one_error_line(cli("plan", fake_config(tmp_path, knobs=knobs)), "knobs")
    assert time.monotonic() - started < 10


def test_the_product_of_settings_is_bounded_before_it_is_built():
    launch_knobs.check_count({"A": list(range(8)), "B": list(range(8))})  # 64: allowed
    with pytest.raises(ValueError, match="9 × 8 = 72 combinations"):
        launch_knobs.check_count({"A": list(range(9)), "B": list(range(8))})
    with pytest.raises(ValueError, match="at most 64"):  # counted, never built: 32**6 would not fit in memory
        launch_knobs.check_count({f"K{i}": list(range(32)) for i in range(6)})


# --- moecal's own files: a non-finite parity figure ---------------------------------------------------------------

# A SYNTHETIC benchmark whose fused kernel (the fused arm: the cap above its Dff) logs a parity call with a NaN and an
# overflowing (1e999 → inf) error when the probe is on; every run prints a Decode line.
NAN_PARITY = """import os, sys
dff, cap = int(sys.argv[1]), int(os.environ.get("MLXCEL_FUSED_MOE_MAX_DFF", "0"))
if os.environ.get("MLXCEL_FUSED_MOE_PARITY_CHECK") == "1" and dff <= cap:
    print(f"[fused-moe-parity] call 1: fused-vs-ref=nan fused-vs-truth=1e999 ref-vs-truth=1.0e-03 ref_rms=1.0e+00 "
          f"truth_rms=1.0e+00 (act=0 k=8 din=2048 dff={dff})", file=sys.stderr)
print("Decode: 1.00 ms (100.00 tok/s)")
"""


def test_a_nan_parity_figure_is_recorded_readably_and_reported(tmp_path):
    import json

    (tmp_path / "bench.py").write_text(NAN_PARITY)
    workload = {
        "command": [sys.executable, str(tmp_path / "bench.py"), "{dff}"],
        "dispatch_check": {},
        "dispatch_probe": None,
    }
    config = fake_config(tmp_path, models=[{"name": "a", "dff": 1024}, {"name": "b", "dff": 2048}], workload=workload)
    run = tmp_path / "run"
    done = cli("sweep", config, "--out", run, "--rounds", "2")
    assert done.returncode in (0, 1), done.stderr
    record = json.loads((run / "verification.json").read_text())  # strict: no NaN token in the file
    fused = next(r for r in record["models"]["a"]["runs"] if r["path"] == "fused")
    assert fused["fused_vs_ref_worst"] == "nan" and fused["fused_vs_truth_worst"] == "inf"
    summary = cli("summarize", run, "--json")
    assert summary.returncode == 0, summary.stderr
    points = {p["model"]: p for p in json.loads(summary.stdout)["points"]}
    assert "CHECK: non-finite" in points["a"]["parity_class"]
    assert points["a"]["fused_vs_ref_worst"] is None  # JSON output: null, never NaN


@pytest.mark.parametrize("field", ["current_default", "rounds"])
def test_a_400_digit_integer_in_meta_json_is_one_line(tmp_path, field):
    meta = {**SYNTHETIC_META, field: int("9" * 400)}
    run = write_run(tmp_path / "run", synthetic_samples(linear_curve([1024, 4096, 8192], 6000)), meta)
    for command in ("summarize", "crossover"):
        _one_error_line(cli(command, run), "(400 digits) does not fit in 64 bits")


# --- until-decided: its state at every look -----------------------------------------------------------------------


class _Interrupted(Exception):
    pass


def test_an_interrupted_until_decided_sweep_resumes_at_the_next_look(tmp_path, monkeypatch):
    """SYNTHETIC fake benchmark (seeded): the sweep is interrupted right after its first look was saved. meta.json
    then holds the look count and the look level (a later analysis reads the run at it), and `--resume
    --until-decided` goes on with look 2: the alpha spent by the first look is not spent again."""
    from harness.measure import allocation
    from tests.helpers import FAKE_BENCH

    command = [str(FAKE_BENCH), "--dff", "{dff}", "--noise", "0.008", "--seed", "0", "--counter", str(tmp_path / "n")]
    config = fake_config(
        tmp_path,
        workload={"command": command},
        models=[{"name": f"m{d}", "dff": d} for d in (1024, 5120, 6000, 10000)],
        measure={"rounds": 3, "until_decided": True, "max_rounds": 12, "looks": 4},
    )
    saved = allocation.record_into

    def save_then_stop(meta, record):
        saved(meta, record)
        raise _Interrupted

    monkeypatch.setattr(allocation, "record_into", save_then_stop)
    out = tmp_path / "run"
    with pytest.raises(_Interrupted):
        from harness.cli.app import main

        main(["sweep", str(config), "--out", str(out), "--no-report"])
    meta = json.loads((out / "meta.json").read_text())
    assert meta["until_decided"]["looks"] == 1
    level = meta["until_decided"]["look_confidence"]
    assert level == pytest.approx(1 - 0.05 / 4) and meta["policy"]["look_confidence"] == level
    assert json.loads(cli("crossover", out, "--json").stdout)["confidence"] == pytest.approx(level)
    monkeypatch.setattr(allocation, "record_into", saved)
    resumed = cli("sweep", config, f"--resume={out}", "--until-decided", "--no-report")
    assert resumed.returncode == 0, resumed.stderr
    looks = [line for line in (resumed.stdout + resumed.stderr).splitlines() if line.lstrip().startswith("look ")]
    assert looks and looks[0].lstrip().startswith("look 2/4"), looks
    assert json.loads((out / "meta.json").read_text())["until_decided"]["looks"] == 1 + len(looks)


@pytest.mark.parametrize(
    ("measure", "flags", "expected"),
    [
        ({"max_rounds": 100000}, [], "measure.max_rounds: 100000: at most"),
        ({"max_rounds": 10**12}, [], "measure.max_rounds: 1000000000000: at most"),
        ({}, ["--max-rounds", "100000"], "--max-rounds: 100000: at most"),
    ],
)
def test_max_rounds_beyond_what_a_look_can_analyse_is_one_line(tmp_path, measure, flags, expected):
    config = fake_config(tmp_path, measure={"rounds": 3, "until_decided": True, **measure})
    started = time.monotonic()
    _one_error_line(cli("sweep", config, "--out", tmp_path / "run", *flags), expected)
    assert not (tmp_path / "run").exists()
    if not flags:
        _one_error_line(cli("plan", config), expected)
    assert time.monotonic() - started < 30


# --- odd files: FIFOs, git refs, byte-order marks ---------------------------------------------------------------------


def test_a_fifo_in_an_mlxcel_tree_is_skipped_and_never_blocks(tmp_path):
    import os
    import threading

    from harness.config.mlxcel_tree import derive
    from tests.test_mlxcel_families import _tree

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


def test_a_fifo_given_as_input_is_not_a_regular_file(tmp_path):
    import os

    os.mkfifo(tmp_path / "pipe.csv")
    _one_error_line(cli("crossover", tmp_path / "pipe.csv"), "not a regular file")


def test_a_csv_with_a_utf8_byte_order_mark_is_read(tmp_path):
    samples = synthetic_samples(linear_curve([1024, 4096, 8192], 6000))
    run = write_run(tmp_path / "run", samples)
    plain = cli("crossover", run / "samples.csv", "--json")
    bom = tmp_path / "bom.csv"
    bom.write_bytes(b"\xef\xbb\xbf" + (run / "samples.csv").read_bytes())
    marked = cli("crossover", bom, "--json")
    assert plain.returncode == marked.returncode == 0, marked.stderr
    same = marked.stdout.replace(str(bom), str(run / "samples.csv"))
    assert json.loads(same) == json.loads(plain.stdout)  # the same analysis, the mark gone


# --- report --append-to: markers --------------------------------------------------------------------------------------

OPEN, CLOSE = "<!-- moecal:addendum run -->", "<!-- /moecal:addendum run -->"


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
    _one_error_line(done, "not one opening and one closing comment")
    assert not (tmp_path / "reports").exists() and doc.read_text() == before


def test_a_marker_pair_shown_in_a_code_fence_is_not_replaced():
    from harness.output.design_doc import insert_addendum

    example = f"Mark a run like this:\n\n```markdown\n{OPEN}\n(the addendum)\n{CLOSE}\n```\n"
    text, replaced = insert_addendum(f"# Design\n\n{example}", "### New\n", "run")
    assert not replaced and example in text and text.endswith(f"{OPEN}\n### New\n{CLOSE}\n")
    again, replaced = insert_addendum(text, "### Newer\n", "run")
    assert replaced and example in again and "### Newer" in again and "### New\n" not in again


# --- JSON outputs: always one strict JSON object --------------------------------------------------------------------


def _strict(text: str) -> dict:
    def refuse(name: str) -> None:
        raise AssertionError(f"{name} in JSON output")

    value = json.loads(text, parse_constant=refuse)
    assert isinstance(value, dict)
    return value


def test_check_json_never_prints_nan(tmp_path):
    runs = [
        write_run(tmp_path / name, synthetic_samples(linear_curve([1024, 4096, 8192], crossover), rounds=2, seed=seed))
        for name, crossover, seed in (("a", 6000, 1), ("b", 5000, 2))
    ]
    done = cli("check", "--baseline", runs[0], "--current", runs[1], "--json")
    assert done.returncode == 0, done.stderr
    _strict(done.stdout)  # a point of two rounds has no finite interval: null, not NaN


def test_sweep_dry_run_json_prints_the_plan_as_json(tmp_path):
    done = cli("sweep", fake_config(tmp_path), "--dry-run", "--json")
    assert done.returncode == 0, done.stderr
    plan = _strict(done.stdout)
    assert plan["dry_run"] is True and plan["points"] and not (tmp_path / "results").exists()


def test_sweep_json_answers_with_an_object_when_every_run_fails(tmp_path):
    (tmp_path / "bench.py").write_text("import sys\nif '--help' in sys.argv:\n    sys.exit(0)\nsys.exit('broken')\n")
    workload = {"command": [sys.executable, str(tmp_path / "bench.py"), "{dff}"], "dispatch_probe": None}
    config = fake_config(tmp_path, models=[{"name": "a", "dff": 1024}], workload=workload)
    done = cli("sweep", config, "--out", tmp_path / "run", "--rounds", "1", "--json")
    assert done.returncode == 1
    answer = _strict(done.stdout)
    assert "no run succeeded" in answer["error"] and answer["run_dir"] == str(tmp_path / "run")


# --- the device-defaults patch against an odd switch_layers.rs --------------------------------------------------------


def _defaults_report(tmp_path, edit):
    """`report` of a SYNTHETIC metal and cuda run against a SYNTHETIC mlxcel tree whose switch_layers.rs `edit`
    rewrote (bytes → bytes); returns (the finished command, the tree)."""
    from harness.output.mlxcel_source import SWITCH_LAYERS
    from tests.helpers import run_cli
    from tests.test_device_defaults import _run, fixture_tree

    (tmp_path / "pyproject.toml").write_text("")
    tree = fixture_tree(tmp_path / "mlxcel")
    switch = tree / SWITCH_LAYERS
    switch.write_bytes(edit(switch.read_bytes()))
    build = {"mlxcel_commit": "2fcdbe5f", "mlx_commit": "81ba1c6a"}
    metal = _run(tmp_path / "results" / "m3", "metal", "Apple M3 Max", 5000, 4096, build)
    cuda = _run(tmp_path / "results" / "gb10", "cuda", "NVIDIA GB10", 11000, 8192, build)
    return run_cli("report", metal, cuda, "--out", tmp_path / "reports", "--mlxcel-src", tree, cwd=tmp_path), tree


def _marked(*parts: str):
    from harness.output.device_defaults import BEGIN, END

    text = "\n".join({"B": BEGIN, "E": END}.get(p, p) for p in parts) + "\n"
    return lambda source: source + text.encode()


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
    _one_error_line(done, "moecal markers")
    assert not (tmp_path / "reports").exists()


def test_a_crlf_switch_layers_gets_a_patch_that_applies(tmp_path):
    import subprocess

    from harness.output.device_defaults import BEGIN
    from harness.output.mlxcel_source import SWITCH_LAYERS

    done, tree = _defaults_report(tmp_path, lambda source: source.replace(b"\r\n", b"\n").replace(b"\n", b"\r\n"))
    assert done.returncode == 0, done.stderr
    (patch,) = (tmp_path / "reports").glob("*-device-defaults.diff")
    subprocess.run(["git", "init", "-q", str(tree)], check=True)
    subprocess.run(["git", "-C", str(tree), "apply", str(patch)], check=True, capture_output=True)
    patched = (tree / SWITCH_LAYERS).read_bytes()
    assert BEGIN.encode() + b"\r\n" in patched and b"\n" not in patched.replace(b"\r\n", b"")
