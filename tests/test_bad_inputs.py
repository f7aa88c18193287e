"""A corpus of bad inputs through the real CLI: each must end in exactly one `error:` line on stderr, the expected
exit code, no traceback, no existing file changed (in the workspace, and outside it where symbolic links point)
and no process of the case left running. Inputs are SYNTHETIC files built in a tmp folder; the hostile benchmarks
are small scripts written there.

Most cases call `harness.cli.app.main` in-process (an exception escaping it fails the test, which is the point); a few
go through `python -m harness` to check the real entry point prints the same single line.
"""

from __future__ import annotations

import csv
import fcntl
import importlib.util
import io
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml

from harness.errors import InputError
from harness.runs.formats import SAMPLE_COLUMNS, csv_line, format_provenance, read_frame
from tests.fake_models import CONFIGS as FAKE_MODELS
from tests.fake_models import write_models
from tests.helpers import REPO, cli, fake_config, run_cli
from tests.synth_sources import source_folder
from tests.synthetic_sweeps import DESIGN_EXAMPLE_CSV, SYNTHETIC_META, linear_curve, synthetic_samples, write_run

MLXCEL_HEADER = DESIGN_EXAMPLE_CSV.splitlines(keepends=True)[2]
BENCH_HEADER = (  # mlxcel's scripts/bench_decode.sh CSV (tests/test_mlxcel_bench_csv.py)
    "model,model_path,prompt_tokens,generated_tokens,prefill_ms,prefill_tok_s,decode_ms,decode_tok_s,date,hardware,"
    "mlx_version,build_type,max_tokens,prompt,prompt_target_len"
)


def _samples_with(ws: Path, name: str, edit) -> Path:
    """A copy of the good run's samples.csv with one row changed by `edit(row dict)`."""
    lines = (ws / "good" / "samples.csv").read_text().splitlines(keepends=True)
    header_end = next(i for i, line in enumerate(lines) if not line.startswith("#"))
    columns = lines[header_end].strip().split(",")
    row = dict(zip(columns, lines[header_end + 1].rstrip("\n").split(","), strict=True))
    edit(row)
    lines[header_end + 1] = csv_line(row.values())
    path = ws / f"{name}.csv"
    path.write_text("".join(lines))
    return path


# Hostile benchmarks (SYNTHETIC; they measure nothing). Each names the workspace in its command line (the
# leftover check looks for it); `child` starts a process in a session of its own that keeps stdout open.
SLEEPER = "import time; time.sleep(120)\n"
HOSTILE = {
    # exits at once, without a metric line, leaving a child that left its session and holds stdout
    "leaves-a-child.py": """import subprocess, sys
subprocess.Popen([sys.executable, sys.argv[1]], start_new_session=True)
print("no metric here", flush=True)
""",
    # never exits, and neither does its child
    "never-exits.py": """import subprocess, sys, time
subprocess.Popen([sys.executable, sys.argv[1]], start_new_session=True)
time.sleep(120)
""",
    # the first run succeeds; every later one writes its pid and hangs with a child (for the signal tests)
    "hangs-after-first.py": """import os, subprocess, sys, time
if "--help" in sys.argv:  # the sweep's usage check before measuring: answered, not counted as a run
    print("usage: hangs-after-first.py SLEEPER COUNTER PIDFILE")
    sys.exit(0)
counter = sys.argv[2]
runs = int(open(counter).read()) if os.path.exists(counter) else 0
open(counter, "w").write(str(runs + 1))
if runs:
    subprocess.Popen([sys.executable, sys.argv[1]], start_new_session=True)
    open(sys.argv[3], "w").write(str(os.getpid()))
    time.sleep(120)
print("Decode: 1.00 ms (100.00 tok/s)", flush=True)
""",
}


def _hostile_config(ws: Path, name: str, script: str, timeout_s: float, *extra: str) -> Path:
    data = {
        "name": name,
        "backend": "cpu",
        "current_default": 4096,
        "workload": {
            "kind": "command",
            "command": [sys.executable, str(ws / script), str(ws / "sleeper.py"), *extra],
            "timeout_s": timeout_s,
        },
        "models": [{"name": "m", "dff": 1024}],
        "measure": {"warmup_runs": 0, "rounds": 1},
    }
    path = ws / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _edited_config(ws: Path, name: str, edit) -> None:
    """A copy of the fake benchmark's config with `edit(data)` applied (written with yaml, so any string fits)."""
    data = yaml.safe_load((ws / "config.yaml").read_text())
    edit(data)
    (ws / name).write_text(yaml.safe_dump(data, sort_keys=False, allow_unicode=True))


def _link_run(ws: Path, outside: Path, name: str, link: str) -> None:
    """A copy of the good run whose `link` file is a symbolic link to a file outside the workspace."""
    folder = ws / name
    write_run(folder, synthetic_samples(linear_curve([1024, 4096], 5000), seed=4))
    target = outside / f"{name}-{link}"
    target.write_text("a file outside the run directory\n")
    (folder / link).unlink(missing_ok=True)
    (folder / link).symlink_to(target)


@pytest.fixture(scope="module")
def outside(tmp_path_factory) -> Path:
    """Files outside the workspace that symbolic links in it point to: no case may change them."""
    return tmp_path_factory.mktemp("outside")


@pytest.fixture(scope="module")
def ws(tmp_path_factory, outside) -> Path:
    """The workspace: one good run, a config of the fake benchmark, and every bad file the cases name."""
    ws = tmp_path_factory.mktemp("bad-inputs")
    good = write_run(ws / "good", synthetic_samples(linear_curve([1024, 4096, 8192], 5000), seed=1))
    config = fake_config(ws)
    (ws / "latin1.yaml").write_bytes("name: caf\xe9\n".encode("latin-1"))
    (ws / "broken.yaml").write_text("name: [unclosed\n")
    (ws / "unknown-key.yaml").write_text(config.read_text() + "colour: blue\n")
    (ws / "empty.yaml").write_text("")
    (ws / "empty.csv").write_text("")
    (ws / "latin1.csv").write_bytes("model,dff\ncaf\xe9,1\n".encode("latin-1"))
    (ws / "other.csv").write_text("a,b\n1,2\n")
    _samples_with(ws, "nan-tok-s", lambda r: r.update(tok_s="nan"))
    _samples_with(ws, "zero-tok-s", lambda r: r.update(tok_s="0"))
    _samples_with(ws, "inf-tok-s", lambda r: r.update(tok_s="inf"))
    _samples_with(ws, "bad-arm", lambda r: r.update(arm="both"))
    _samples_with(ws, "two-devices", lambda r: r.update(device="another device"))
    _samples_with(ws, "no-dff", lambda r: r.update(dff=""))
    lines = (ws / "good" / "samples.csv").read_text().splitlines(keepends=True)
    (ws / "duplicate.csv").write_text("".join(lines) + lines[-1])
    (ws / "short-row.csv").write_text("".join(lines) + "synthetic,cpu,short\n")
    summary = ws / "summary-good.csv"
    assert cli("summarize", good, "--out", summary).returncode == 0
    text = summary.read_text()
    (ws / "summary-verdict.csv").write_text(text.replace(",fused,", ",maybe,", 1))
    rows = text.splitlines(keepends=True)
    (ws / "summary-duplicate.csv").write_text("".join(rows) + rows[-1])
    columns = next(line for line in rows if not line.startswith("#")).strip().split(",")
    last = rows[-1].rstrip("\n").split(",")
    last[columns.index("fused_tok_s")] = "inf"
    (ws / "summary-inf.csv").write_text("".join(rows[:-1]) + ",".join(last) + "\n")
    (ws / "mlxcel-nan.csv").write_text(MLXCEL_HEADER + "m,1792,affine,1,2,NaN,2,3,3,3,3,1.5\n")
    (ws / "mlxcel-inf.csv").write_text(MLXCEL_HEADER + "m,1792,affine,1,2,3,2,3,inf,3,3,1.5\n")
    (ws / "mlxcel-negative.csv").write_text(MLXCEL_HEADER + "m,1792,affine,1,2,-3,2,3,3,3,3,1.5\n")
    (ws / "mlxcel-ragged.csv").write_text(MLXCEL_HEADER + "m,1792,affine,1,2,3,2,3,3,3,3,1.5,9,9\n")
    (ws / "mlxcel-order.csv").write_text(
        "model,dff,quant_mode,fallback_run2,fallback_run1,fallback_median,fused_run1,fused_median,x\nm,1,affine,1,2,1,2,2,2\n"
    )
    no_quant = MLXCEL_HEADER.replace("quant_mode,", "")
    (ws / "mlxcel-no-quant.csv").write_text(no_quant + "m,1792,1,2,3,2,3,3,3,3,1.5\n")
    (ws / "mlxcel-ok.csv").write_text(DESIGN_EXAMPLE_CSV)
    for name, meta_text in (("meta-list", "[1, 2]"), ("meta-broken", "{")):
        folder = write_run(ws / name, synthetic_samples(linear_curve([1024, 4096], 5000), seed=2))
        (folder / "meta.json").write_text(meta_text)
    stored = write_run(ws / "stored", synthetic_samples(linear_curve([1024, 4096], 5000), seed=3))
    (stored / ".stored").write_text("a baseline kept outside git\n")
    (ws / "foreign").mkdir()
    (ws / "foreign" / "samples.csv").write_text("a,b\n1,2\n")
    (ws / "reports").mkdir()
    (ws / "reports" / "2026-01-02-synthetic-host-cpu-dff-crossover.md").write_text("### another run's addendum\n")
    (ws / "reports" / "2026-01-02-synthetic-host-cpu.json").write_text('{"moecal_report": 3, "raw_data": "elsewhere"}')
    (ws / "a-directory.csv").mkdir()
    # hardening v3: configs
    workload = lambda **kw: lambda d: d["workload"].update(kw)  # noqa: E731
    model = lambda **kw: lambda d: d["models"][0].update(kw)  # noqa: E731
    _edited_config(ws, "cap-env-empty.yaml", workload(cap_env=""))
    _edited_config(ws, "cap-env-equals.yaml", workload(cap_env="A=B"))
    _edited_config(ws, "env-key-equals.yaml", workload(env={"X=Y": "1"}))
    _edited_config(ws, "nul-model-name.yaml", model(name="a\x00b"))
    _edited_config(ws, "nul-env-value.yaml", workload(env={"X": "a\x00b"}))
    _edited_config(ws, "nul-command.yaml", workload(command=["bench\x00", "{dff}"]))
    _edited_config(ws, "dff-boolean.yaml", model(dff=True))
    _edited_config(ws, "dff-huge.yaml", model(dff=10**13))
    _edited_config(ws, "d-model-boolean.yaml", model(d_model=False))
    _edited_config(ws, "default-huge.yaml", lambda d: d.update(current_default=10**12))
    (ws / "duplicate-key.yaml").write_text((ws / "config.yaml").read_text() + "name: again\n")
    (ws / "deep.yaml").write_text("name: deep\nx: " + "[" * 5000 + "]" * 5000 + "\n")
    (ws / "deep-block.yaml").write_text("x:\n" + "".join("  " * i + "- \n" for i in range(1, 3000)))
    (ws / "fleet-duplicate.yaml").write_text("entries: []\nentries: []\n")
    (ws / "fleet-deep.yaml").write_text("entries: " + "[" * 3000 + "]" * 3000 + "\n")
    for name, text in {
        "json-deep": '{"model_type": ' + "[" * 100_000 + "]" * 100_000 + "}",
        "json-nan": '{"model_type": "mixtral", "intermediate_size": NaN}',
        "json-huge": '{"model_type": "mixtral", "intermediate_size": 1e400}',
    }.items():
        (ws / "models" / name / "m").mkdir(parents=True)
        (ws / "models" / name / "m" / "config.json").write_text(text)
    # mlxcel CSV with a model measured twice at one dff
    row = "m,1792,affine,1,2,3,2,3,3,3,3,1.5\n"
    (ws / "mlxcel-duplicate.csv").write_text(MLXCEL_HEADER + row + row.replace(",1,2,3,", ",4,5,6,"))
    # meta.json naming another device than the samples
    meta = {"backend": "cpu", "device": "another device"}
    write_run(ws / "meta-other-device", synthetic_samples(linear_curve([1024, 4096], 5000), seed=5))
    (ws / "meta-other-device" / "meta.json").write_text(json.dumps(meta))
    # symbolic links out of the workspace
    _link_run(ws, outside, "link-samples", "samples.csv")
    _link_run(ws, outside, "link-meta", "meta.json")
    (ws / "link-lock").mkdir()
    (outside / "lock-target").write_text("not a lock\n")
    (ws / "link-lock" / ".lock").symlink_to(outside / "lock-target")
    (outside / "summary-target.csv").write_text("not a summary\n")
    (ws / "summary-link.csv").symlink_to(outside / "summary-target.csv")
    (ws / "import-link").mkdir()
    (ws / "import-link" / "meta.json").symlink_to(outside / "dangling-meta.json")
    # hostile benchmarks
    (ws / "sleeper.py").write_text(SLEEPER)
    for script, text in HOSTILE.items():
        (ws / script).write_text(text)
    _hostile_config(ws, "leaves-a-child", "leaves-a-child.py", 5)
    _hostile_config(ws, "never-exits", "never-exits.py", 1)
    (ws / "fleet-ok.yaml").write_text(yaml.safe_dump({"entries": [{"config": str(config), "where": {"hw_a": 1}}]}))
    _hardening_v4(ws, outside, config)
    return ws


def _hardening_v4(ws: Path, outside: Path, config: Path) -> None:
    """Inputs of issue 28 items 1-3: paths that lead out of what the user named, silent wrong results, deletions."""
    fleet = {"entries": [{"config": str(config), "where": {"hw_a": 1}, "name": ".."}]}
    (ws / "fleet-dotdot.yaml").write_text(yaml.safe_dump(fleet))
    source = source_folder(ws / "synth-src", "mixtral")
    (outside / "secret").write_text("a file outside the model folder\n")
    (source / "tokenizer_config.json").unlink()
    (source / "tokenizer_config.json").symlink_to(outside / "secret")
    workload = lambda **kw: lambda d: d["workload"].update(kw)  # noqa: E731
    _edited_config(ws, "check-env-cap.yaml", workload(dispatch_check={"check_env": "MLXCEL_FUSED_MOE_MAX_DFF"}))
    _edited_config(ws, "threshold-env-bad.yaml", workload(dispatch_check={"threshold_env": "A=B"}))
    _edited_config(ws, "probe-env-same.yaml", workload(dispatch_check={"check_env": "P", "threshold_env": "P"}))
    (ws / "parity-existing.txt").write_text("a file the user keeps\n")
    _edited_config(ws, "parity-existing.yaml", workload(parity={"output_file": str(ws / "parity-existing.txt")}))
    (ws / "history-link.png").symlink_to(outside / "history-target.png")  # dangling: writing would create it
    row = "m,1792,affine,1,2,3,2,3,3,3,3,1.5\n"
    (ws / "mlxcel-path-name.csv").write_text(MLXCEL_HEADER + row.replace("m,", "../../x,", 1))
    (ws / "mlxcel-all-na.csv").write_text(MLXCEL_HEADER + "m,1792,affine,NA,NA,NA,NA,NA,NA,NA,NA,NA\n")
    (ws / "mlxcel-torn.csv").write_text(MLXCEL_HEADER + row + "m,4096,affine,1,2\n")
    write_models(ws / "bench", {"mixtral-8x7b-4bit": FAKE_MODELS["mixtral-8x7b-4bit"]})
    bench = {
        "bench-ok": ["mixtral-8x7b-4bit,60,50.00"],
        "bench-inf": ["mixtral-8x7b-4bit,60,inf"],
        "bench-twice": ["mixtral-8x7b-4bit,60,50.00", "mixtral-8x7b-4bit,60,51.00"],
        "bench-fraction": ["mixtral-8x7b-4bit,60.5,50.00"],
        "bench-abs-name": ["/etc,60,50.00"],
    }
    for name, rows in bench.items():
        lines = [BENCH_HEADER]
        for text in rows:
            model, generated, tok_s = text.split(",")
            lines.append(
                f"{model},./m,36,{generated},9.77,3685.82,1200.00,{tok_s},2026-07-03,GB10,0.3.3,release,100,p,"
            )
        (ws / f"{name}.csv").write_text("\n".join(lines) + "\n")


def _bench_import(fallback: str) -> list[str]:
    """import-mlxcel of two bench CSVs: FALLBACK (the case's bad file) against the good fused one."""
    return [
        "import-mlxcel",
        "--fallback",
        f"{{ws}}/{fallback}",
        "--fused",
        "{ws}/bench-ok.csv",
        "--models",
        "{ws}/bench/models",
        "--out",
        "{out}/i",
    ]


# (id, argv with {ws} and {config} placeholders, exit code, text the one error line must contain)
CASES = [
    ("config-missing", ["plan", "{ws}/nope.yaml"], 2, "nope.yaml: (file): cannot read"),
    ("config-not-utf8", ["plan", "{ws}/latin1.yaml"], 2, "latin1.yaml: (file): not UTF-8 text"),
    ("config-invalid-yaml", ["plan", "{ws}/broken.yaml"], 2, "broken.yaml: line 2: invalid YAML"),
    ("config-unknown-key", ["sweep", "{ws}/unknown-key.yaml", "--dry-run"], 2, "unknown-key.yaml: colour"),
    ("config-empty", ["plan", "{ws}/empty.yaml"], 2, "empty.yaml"),
    ("config-is-a-directory", ["plan", "{ws}"], 2, "cannot read"),
    ("rounds-zero", ["plan", "{config}", "--rounds", "0"], 2, "moecal plan: Invalid value for '--rounds'"),
    ("rounds-not-a-number", ["sweep", "{config}", "--rounds", "many"], 2, "Invalid value for '--rounds'"),
    ("unknown-option", ["sweep", "{config}", "--bogus"], 2, "moecal sweep: No such option: --bogus"),
    ("unknown-command", ["sweeps"], 2, "moecal: No such command 'sweeps'"),
    ("missing-argument", ["summarize"], 2, "moecal summarize: Missing argument"),
    ("unknown-backend", ["sweep", "{config}", "--backend", "tpu", "--dry-run"], 2, "unknown backend 'tpu'"),
    ("only-unknown-model", ["sweep", "{config}", "--only", "nope", "--dry-run"], 2, "--only 'nope'"),
    ("out-is-a-file", ["sweep", "{config}", "--out", "{config}", "--dry-run"], 2, "exists and is not a directory"),
    ("out-holds-a-run", ["sweep", "{config}", "--out", "{ws}/good", "--dry-run"], 2, "already holds a run"),
    ("out-unwritable", ["sweep", "{config}", "--out", "/proc/moecal-run", "--no-report"], 2, "/proc/moecal-run"),
    ("resume-missing-dir", ["sweep", "{config}", "--resume", "{ws}/nope", "--dry-run"], 2, "not a moecal run"),
    ("resume-foreign", ["sweep", "{config}", "--resume", "{ws}/foreign", "--dry-run"], 2, "not a samples.csv"),
    ("resume-meta-broken", ["sweep", "{config}", "--resume", "{ws}/meta-broken", "--dry-run"], 2, "not a moecal meta"),
    ("resume-other-config", ["sweep", "{config}", "--resume", "{ws}/good", "--dry-run"], 2, "different config_sha256"),
    ("resume-stored", ["sweep", "{config}", "--resume", "{ws}/stored", "--dry-run"], 2, "marks it read-only"),
    ("resume-and-out", ["sweep", "{config}", "--resume", "{ws}/good", "--out", "{ws}/x"], 2, "--out: "),
    ("resume-nothing", ["sweep", "{config}", "--resume", "--dry-run"], 2, "no unfinished run of this config"),
    ("input-missing", ["summarize", "{ws}/nope.csv"], 2, "no such file or directory"),
    ("input-empty", ["crossover", "{ws}/empty.csv"], 2, "empty.csv: empty file"),
    ("input-not-utf8", ["summarize", "{ws}/latin1.csv"], 2, "latin1.csv: cannot read"),
    ("input-unknown-columns", ["crossover", "{ws}/other.csv"], 2, "not a samples.csv, summary.csv or mlxcel"),
    ("samples-nan", ["summarize", "{ws}/nan-tok-s.csv"], 2, "tok_s: line"),
    ("samples-zero", ["crossover", "{ws}/zero-tok-s.csv"], 2, "must be finite and > 0"),
    ("samples-inf", ["summarize", "{ws}/inf-tok-s.csv"], 2, "inf must be finite and > 0"),
    ("samples-bad-arm", ["summarize", "{ws}/bad-arm.csv"], 2, "arm: line"),
    ("samples-two-devices", ["summarize", "{ws}/two-devices.csv"], 2, "a run holds one device"),
    ("samples-no-dff", ["summarize", "{ws}/no-dff.csv"], 2, "dff: line"),
    ("samples-duplicate", ["summarize", "{ws}/duplicate.csv"], 2, "already an ok row"),
    ("samples-short-row", ["summarize", "{ws}/short-row.csv"], 2, "3 fields, the header has 29"),
    ("summary-verdict", ["crossover", "{ws}/summary-verdict.csv"], 2, "unknown verdict 'maybe'"),
    ("summary-inf", ["crossover", "{ws}/summary-inf.csv"], 2, "fused_tok_s: line"),
    ("summary-duplicate", ["crossover", "{ws}/summary-duplicate.csv"], 2, "already has a row"),
    ("mlxcel-nan", ["summarize", "{ws}/mlxcel-nan.csv"], 2, "fallback_run3: line 2: throughput must be finite"),
    ("mlxcel-inf", ["crossover", "{ws}/mlxcel-inf.csv"], 2, "fused_run2: line 2"),
    ("mlxcel-negative", ["summarize", "{ws}/mlxcel-negative.csv"], 2, "throughput must be finite and > 0"),
    ("mlxcel-ragged", ["summarize", "{ws}/mlxcel-ragged.csv"], 2, "more fields than the header"),
    ("mlxcel-run-order", ["summarize", "{ws}/mlxcel-order.csv"], 2, "expected columns fallback_run1..N"),
    ("mlxcel-no-quant-mode", ["import-mlxcel", "{ws}/mlxcel-no-quant.csv", "--out", "{ws}/imp"], 2, "starts with"),
    ("import-into-a-run", ["import-mlxcel", "{ws}/mlxcel-ok.csv", "--out", "{ws}/good"], 2, "already holds"),
    ("import-into-stored", ["import-mlxcel", "{ws}/mlxcel-ok.csv", "--out", "{ws}/stored"], 2, "read-only"),
    ("meta-not-an-object", ["summarize", "{ws}/meta-list"], 2, "meta.json: not a moecal meta.json"),
    ("run-dir-empty", ["summarize", "{ws}/reports"], 2, "neither is there"),
    ("margin-negative", ["summarize", "{ws}/good", "--margin", "-0.1"], 2, "Invalid value for '--margin'"),
    ("bench-out-stored", ["bench-kernels", "--backend", "cpu", "--out", "{ws}/stored/bench.csv"], 2, "read-only"),
    ("summarize-out-stored", ["summarize", "{ws}/good", "--out", "{ws}/stored/summary.csv"], 2, "read-only"),
    ("summarize-out-unwritable", ["summarize", "{ws}/good", "--out", "/proc/moecal.csv"], 2, "cannot write"),
    ("summarize-mlxcel-dir", ["summarize", "{ws}/good", "--mlxcel", "{ws}/a-directory.csv"], 2, "a-directory.csv"),
    ("report-over-foreign", ["report", "{ws}/good", "--out", "{ws}/reports"], 2, "holds the addendum of elsewhere"),
    ("check-baseline-missing", ["check", "--baseline", "{ws}/nope", "--current", "{ws}/good"], 2, "nope"),
    ("doctor-unknown-backend", ["doctor", "--backend", "tpu"], 2, "unknown backend 'tpu'"),
    # hardening v3 (issue 20): configs that could unforce an arm or reach a process
    ("cap-env-empty", ["sweep", "{ws}/cap-env-empty.yaml", "--dry-run"], 2, "cap_env: '' is not an environment"),
    ("cap-env-equals", ["sweep", "{ws}/cap-env-equals.yaml", "--dry-run"], 2, "cap_env: 'A=B' is not an env"),
    ("env-key-equals", ["sweep", "{ws}/env-key-equals.yaml", "--dry-run"], 2, "workload.env: 'X=Y' is not"),
    ("nul-in-model-name", ["sweep", "{ws}/nul-model-name.yaml", "--dry-run"], 2, "models[0].name: contains a NUL"),
    ("nul-in-env-value", ["sweep", "{ws}/nul-env-value.yaml", "--dry-run"], 2, "workload.env.X: contains a NUL"),
    ("nul-in-command", ["plan", "{ws}/nul-command.yaml"], 2, "workload.command[0]: contains a NUL"),
    ("dff-boolean", ["sweep", "{ws}/dff-boolean.yaml", "--dry-run"], 2, "models[0].dff: expected an integer, got a"),
    ("dff-huge", ["plan", "{ws}/dff-huge.yaml"], 2, "models[0].dff: Input should be less than or equal to 1048576"),
    ("d-model-boolean", ["plan", "{ws}/d-model-boolean.yaml"], 2, "models[0].d_model: expected an integer"),
    ("default-huge", ["plan", "{ws}/default-huge.yaml"], 2, "current_default: Input should be less than or equal"),
    ("cli-default-huge", ["crossover", "{ws}/good", "--current-default", "1000000000000"], 2, "--current-default"),
    ("import-default-huge", ["import-mlxcel", "{ws}/mlxcel-ok.csv", "--current-default", "10000000000000"], 2, "'--"),
    ("yaml-duplicate-key", ["plan", "{ws}/duplicate-key.yaml"], 2, "invalid YAML: duplicate key 'name'"),
    ("yaml-nested-deep", ["plan", "{ws}/deep.yaml"], 2, "deep.yaml: line 2: invalid YAML: nested deeper than 64"),
    ("yaml-nested-deep-block", ["plan", "{ws}/deep-block.yaml"], 2, "invalid YAML: nested deeper than 64 levels"),
    ("fleet-duplicate-key", ["fleet", "{ws}/fleet-duplicate.yaml", "--dry-run"], 2, "duplicate key 'entries'"),
    ("fleet-nested-deep", ["fleet", "{ws}/fleet-deep.yaml", "--dry-run"], 2, "nested deeper than 64 levels"),
    ("json-nested-deep", ["init", "--models", "{ws}/models/json-deep", "--out", "{out}/c.yaml"], 2, "nested 100001"),
    ("json-nan", ["init", "--models", "{ws}/models/json-nan", "--out", "{out}/c.yaml"], 2, "NaN is not a number"),
    ("json-1e400", ["init", "--models", "{ws}/models/json-huge", "--out", "{out}/c.yaml"], 2, "1e400 is out of range"),
    # readers
    ("mlxcel-duplicate-row", ["summarize", "{ws}/mlxcel-duplicate.csv"], 2, "model: line 3: 'm' at dff 1792 already"),
    ("meta-other-device", ["summarize", "{ws}/meta-other-device"], 2, "meta.json: device: 'another device', but"),
    # run directories: no writes through symbolic links
    ("resume-samples-link", ["sweep", "{config}", "--resume", "{ws}/link-samples"], 2, "samples.csv: is a symbolic"),
    ("resume-meta-link", ["sweep", "{config}", "--resume", "{ws}/link-meta"], 2, "meta.json: is a symbolic link"),
    ("out-lock-link", ["sweep", "{config}", "--out", "{ws}/link-lock", "--no-report"], 2, ".lock: is a symbolic link"),
    ("summarize-out-link", ["summarize", "{ws}/good", "--out", "{ws}/summary-link.csv"], 2, "is a symbolic link"),
    ("import-meta-link", ["import-mlxcel", "{ws}/mlxcel-ok.csv", "--out", "{ws}/import-link"], 2, "symbolic link"),
    # hardening v4 (issue 28): reads and writes stay where the user pointed
    ("fleet-name-dotdot", ["fleet", "{ws}/fleet-dotdot.yaml", "--dry-run"], 2, "entries[0].name: '..' names no"),
    (
        "synth-like-link-out",
        ["synth", "--like", "{ws}/synth-src/mixtral-tiny", "--dff", "64", "--out", "{out}/s"],
        2,
        "tokenizer_config.json: --like: is a symbolic link out of the model folder",
    ),
    ("check-reports-missing", ["check-reports", "{ws}/nope"], 2, "nope: FOLDERS: no such folder"),
    ("history-out-link", ["history", "{ws}/good", "{ws}/good", "--out", "{ws}/history-link.png"], 2, "symbolic link"),
    # no silent wrong result; nothing deleted that moecal did not create
    ("check-env-is-cap", ["sweep", "{ws}/check-env-cap.yaml", "--dry-run"], 2, "check_env: 'MLXCEL_FUSED_MOE_MAX_DFF"),
    ("probe-env-same", ["sweep", "{ws}/probe-env-same.yaml", "--dry-run"], 2, "dispatch_check: check_env and thr"),
    ("threshold-env-bad", ["sweep", "{ws}/threshold-env-bad.yaml", "--dry-run"], 2, "threshold_env: 'A=B' is not"),
    ("parity-output-exists", ["sweep", "{ws}/parity-existing.yaml", "--dry-run"], 2, "output_file: '"),
    ("import-model-is-a-path", ["import-mlxcel", "{ws}/mlxcel-path-name.csv", "--out", "{out}/i"], 2, "'../../x' is a"),
    (
        "import-bench-model-is-a-path",
        _bench_import("bench-abs-name.csv"),
        2,
        "bench-abs-name.csv: model: line 2: '/etc' is a path, not a name",
    ),
    # import-mlxcel refuses what no other command can read
    (
        "import-bench-inf",
        _bench_import("bench-inf.csv"),
        2,
        "bench-inf.csv: decode_tok_s: line 2: must be a finite number > 0, got 'inf'",
    ),
    (
        "import-bench-duplicate",
        _bench_import("bench-twice.csv"),
        2,
        "fallback run 1 appears twice",
    ),
    (
        "import-same-file-both-arms",
        _bench_import("bench-ok.csv"),
        2,
        "bench-ok.csv: --fused: is the same file as",
    ),
    (
        "import-fractional-tokens",
        _bench_import("bench-fraction.csv"),
        2,
        "generated_tokens: line 2: 60.5 is not a whole number of tokens",
    ),
    ("import-nothing-usable", ["import-mlxcel", "{ws}/mlxcel-all-na.csv", "--out", "{out}/i"], 2, "no measured run"),
    (
        "mlxcel-torn-last-row",
        ["summarize", "{ws}/mlxcel-torn.csv"],
        2,
        "mlxcel-torn.csv: line 3: 5 fields, the header has 12",
    ),
    # benchmarks whose descendants outlive them: the deadline holds and nothing is left running
    ("bench-leaves-a-child", ["sweep", "{ws}/leaves-a-child.yaml", "--out", "{out}/r"], 1, "metric_regex did not"),
    ("bench-never-exits", ["sweep", "{ws}/never-exits.yaml", "--out", "{out}/r"], 2, "did not answer `--help`"),
]
if importlib.util.find_spec("ray") is not None:  # the 'fleet' extra (make test installs it)
    CASES.append(
        ("fleet-address-unreachable", ["fleet", "{ws}/fleet-ok.yaml", "--address", "127.0.0.1:1"], 2, "nothing answers")
    )


def _snapshot(*folders: Path) -> dict[Path, bytes]:
    """Every file's bytes (a link reads as its target's, which `outside` holds too)."""
    return {p: p.read_bytes() for folder in folders for p in folder.rglob("*") if p.is_file() and p.name != ".lock"}


def _running(marker: Path) -> list[str]:
    """Command lines of live processes that name `marker` (a case's hostile benchmark and its children)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and entry.name != str(os.getpid()):
            try:
                command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if str(marker) in command:
                found.append(f"{entry.name}: {command}")
    return found


def _argv(args: list[str], ws: Path, out: Path | None = None) -> list[str]:
    return [a.format(ws=ws, config=ws / "config.yaml", out=out) for a in args]


def _assert_one_error_line(stderr: str, stdout: str, code: int, returncode: int, expected: str) -> None:
    """Exactly one `error:` line, the last one; before it only a sweep that ran (exit 1, or stopped by a signal)
    may print its progress lines."""
    lines = stderr.strip().splitlines()
    assert returncode == code, stderr
    assert lines and lines[-1].startswith("error: "), stderr
    assert len(lines) == 1 or code != 2, stderr
    assert sum(line.startswith("error: ") for line in lines) == 1, stderr
    assert expected in lines[-1] and "Traceback" not in stderr + stdout, lines[-1]


@pytest.mark.parametrize(("argv", "code", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_is_one_error_line(ws, outside, tmp_path, argv, code, expected):
    """`{out}` is the case's own output folder (a fresh tmp folder): everything else must stay as it was."""
    before = _snapshot(ws, outside)
    done = cli(*_argv(argv, ws, tmp_path), cwd=ws)
    _assert_one_error_line(done.stderr, done.stdout, code, done.returncode, expected)
    assert _snapshot(ws, outside) == before, "a failing command changed a file"
    assert not _running(ws), "a process of the case is still running"


@pytest.mark.parametrize(("signum", "code"), [(signal.SIGTERM, 143), (signal.SIGHUP, 129)])
def test_a_signal_ends_the_sweep_like_ctrl_c(ws, outside, tmp_path, signum, code):
    """A real `moecal sweep` whose second run hangs (its benchmark with a child in its own session) gets SIGTERM or
    SIGHUP: the benchmark and its child end, the segment is closed (end, rows), the lock released, one line."""
    hung = tmp_path / "hung.pid"
    config = _hostile_config(tmp_path, "hangs", "hangs-after-first.py", 60, str(tmp_path / "count"), str(hung))
    for name in ("hangs-after-first.py", "sleeper.py"):
        (tmp_path / name).write_text((ws / name).read_text())
    before = _snapshot(ws, outside)
    run = tmp_path / "run"
    env = {**os.environ, "COLUMNS": "200", "PYTHONPATH": str(REPO)}
    sweep = subprocess.Popen(
        [sys.executable, "-m", "harness", "sweep", str(config), "--out", str(run), "--no-report"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        deadline = time.monotonic() + 60
        while not hung.exists() and time.monotonic() < deadline and sweep.poll() is None:
            time.sleep(0.05)
        assert hung.exists(), "the second run never started"
        time.sleep(0.3)  # the sweep is inside the run now (its tree sampled)
        sweep.send_signal(signum)
        stdout, stderr = sweep.communicate(timeout=30)
    finally:
        sweep.kill()
    _assert_one_error_line(stderr, stdout, code, sweep.returncode, f"terminated by {signal.Signals(signum).name}")
    segment = json.loads((run / "meta.json").read_text())["segments"][-1]
    assert segment["rows"] == 1 and segment["end"], segment
    assert not _running(tmp_path), "the benchmark or its child is still running"
    with open(run / ".lock") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)  # released: no BlockingIOError
    assert _snapshot(ws, outside) == before


def test_the_corpus_is_large_and_names_are_unique():
    assert len(CASES) >= 80 and len({c[0] for c in CASES}) == len(CASES)


@pytest.mark.parametrize("name", ["unknown-option", "config-not-utf8", "samples-duplicate", "out-unwritable"])
def test_the_real_entry_point_prints_the_same_one_line(ws, name):
    argv, code, expected = next(c[1:] for c in CASES if c[0] == name)
    done = run_cli(*_argv(argv, ws), cwd=ws)
    assert done.returncode == code and "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and expected in lines[0], done.stderr


def test_a_summary_of_the_earlier_engine_points_to_the_samples():
    """The stored CPU baseline's summary.csv predates the t-interval engine: reading it alone must say what to do."""
    stored = REPO / "results" / "20261130-cpu-vm-cpu-smoke"
    done = cli("crossover", stored / "summary.csv")
    assert done.returncode == 2 and "earlier bootstrap engine" in done.stderr and str(stored) in done.stderr
    assert cli("crossover", stored).returncode == 0  # the run directory reads its samples


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
    md_path, _, _ = write_report(run, tmp_path / "out")
    body = md_path.read_text()
    assert body.count("\n#") == 0 and body.startswith("### ")  # one heading, nothing injected
    prose = re.sub(r"`[^`]*`", "", body)  # inside a code span HTML and `$` are inert (CommonMark)
    assert "<img" not in prose and "$x$" not in prose
    rows = [line for line in body.splitlines() if line.startswith("|")]
    assert rows and len({_table_cells(line) for line in rows}) == 1  # a name never adds or splits a cell
    assert labels and not any(matplotlib.cbook.is_math_text(label) for label in labels)
    shown = name.replace("\n", " ").replace("$", "\\$")  # one line, `$` escaped: mathtext shows it as typed
    assert any(shown in label for label in labels)


# Hardening v4 (issue 28): results that must not be silently wrong. Not error lines: what moecal writes and reads back.
FORMULA_NAME = '=HYPERLINK("http://x","click"),\n@SUM(1+1)'  # a formula, a comma and a newline in one model name


def _formula_cells(path: Path) -> list[str]:
    """Cells of a CSV (its `#` header skipped) that a spreadsheet would run as a formula."""
    from harness.runs.formats import FORMULA_STARTS

    lines = path.read_text().splitlines(keepends=True)
    body = "".join(line for line in lines if not line.startswith("#"))
    cells = [cell for row in csv.reader(io.StringIO(body)) for cell in row]
    return [c for c in cells if c.startswith(FORMULA_STARTS) and not re.fullmatch(r"[-+]?[\d.]+([eE][-+]?\d+)?", c)]


def test_a_formula_name_is_inert_in_every_csv_and_reads_back_to_the_same_decision(tmp_path):
    """SYNTHETIC run whose model name is a formula with a comma and a newline: samples.csv (as the sweep writes it),
    summary.csv and the mlxcel export hold no formula cell and no injected header line, and all three read back
    to the same name and the same decision."""
    from harness.runs.formats import frame_csv

    samples = synthetic_samples(linear_curve([1024, 4096, 8192], 5000), seed=8, workload="command")
    samples["model"] = FORMULA_NAME
    run = tmp_path / "run"
    run.mkdir()
    (run / "samples.csv").write_text(format_provenance(SYNTHETIC_META) + frame_csv(samples))
    (run / "meta.json").write_text(json.dumps(SYNTHETIC_META))
    summary, export = tmp_path / "summary.csv", tmp_path / "mlxcel.csv"
    assert cli("summarize", run, "--out", summary, "--mlxcel", export).returncode == 0
    decisions = []
    for path in (run / "samples.csv", summary, export):
        assert _formula_cells(path) == [], path
        assert all(line.startswith("#") for line in header_lines_text(path)), path  # nothing injected
        assert set(read_frame(path)["model"]) == {FORMULA_NAME}, path
        done = cli("crossover", path if path != run / "samples.csv" else run, "--json")
        assert done.returncode == 0, done.stderr
        decision = json.loads(done.stdout)
        # the crossover as the addendum prints it (whole Dff): the export keeps tok/s to 2 decimals, so its last
        # digits move by far less than one Dff
        decisions.append((decision["action"], decision["recommended_cap"], round(decision["crossover_dff"])))
    assert len(set(decisions)) == 1, decisions


def header_lines_text(path: Path) -> list[str]:
    """The lines before the CSV's column row (what the `#` provenance header holds)."""
    lines = path.read_text().splitlines()
    return lines[: next(i for i, line in enumerate(lines) if not line.startswith("#"))]


@pytest.mark.parametrize("value", [float("nan"), -0.01, 0.2])
def test_a_nan_negative_or_large_parity_error_is_never_within(value):
    """The verification pass's figures (harness.measure.dispatch) and the addendum's phrase: `x > limit` is False for
    NaN, so NaN (and a negative RMS, which cannot be) must count as over, never "within"."""
    from harness.analysis.dispatch_evidence import parity_class
    from harness.measure.bench_output import ParityCall
    from harness.measure.dispatch import _figures

    calls = [ParityCall(1, 0.001, 0.001, 0.001, 1024, 2048, 8), ParityCall(2, value, 0.001, 0.001, 1024, 2048, 8)]
    figures = _figures(calls)
    assert figures["over"] == 1
    assert "CHECK" in parity_class(figures) and "within" not in parity_class(figures)


def test_an_import_layout_that_lets_inf_or_a_repeated_run_through_is_still_refused(tmp_path):
    """harness.runs.import_checks holds for every CSV layout a reader adds, before anything is written."""
    from harness.runs.import_checks import check_imported

    row = {"model": "m", "dff": 1024, "quant_mode": "", "arm": "fused", "round": 0, "status": "ok", "tok_s": 5.0}
    frame = pd.DataFrame([row, {**row, "arm": "fallback", "tok_s": float("inf")}]).reindex(columns=SAMPLE_COLUMNS)
    with pytest.raises(InputError, match="inf must be finite"):
        check_imported(frame, "x.csv")
    with pytest.raises(InputError, match="fused run 1 appears twice"):
        check_imported(pd.DataFrame([row, row]).reindex(columns=SAMPLE_COLUMNS), "x.csv")


JSON_COMMANDS = ("summarize", "crossover", "plan", "sweep", "check", "compare", "history", "doctor")
# the first refused case of each command with --json, and summarize failing after it printed its object
JSON_CASES = [
    *{c[1][0]: c for c in reversed(CASES) if c[1][0] in JSON_COMMANDS and c[2] == 2}.values(),
    next(c for c in CASES if c[0] == "summarize-out-unwritable"),
    next(c for c in CASES if c[0] == "unknown-option"),
]


@pytest.mark.parametrize(("argv", "expected"), [(c[1], c[3]) for c in JSON_CASES], ids=[c[0] for c in JSON_CASES])
def test_with_json_an_error_is_the_one_object_on_stdout(ws, tmp_path, argv, expected):
    """`--json` promises one JSON object on stdout on every path: an error is `{"error": <the line>, ...}`, and
    nothing the command printed before failing (summarize prints its object, then writes --out) comes along."""
    done = cli(*_argv(argv, ws, tmp_path), "--json", cwd=ws)
    assert done.returncode == 2, done.stderr
    result = json.loads(done.stdout)  # exactly one JSON document, or this raises
    assert isinstance(result, dict) and result["exit_code"] == 2
    assert expected in result["error"] and done.stderr.strip() == f"error: {result['error']}"


SHORT_WRITE = """import resource, sys
from pathlib import Path
from harness.errors import InputError
from harness.runs.rundir import SampleWriter
resource.setrlimit(resource.RLIMIT_FSIZE, (4000, 4000))  # samples.csv reaches it part-way through a row
appended = 0
try:
    with SampleWriter(Path(sys.argv[1]), {"backend": "cpu", "device": "d"}) as writer:
        for index in range(1000):
            writer.append({"backend": "cpu", "device": "d", "model": "m", "dff": 1024, "arm": "fused",
                           "round": index, "tok_s": 5.0, "status": "ok", "error": "x" * (index % 7)})
            appended += 1
except InputError as exc:
    print(appended, exc)
"""


def _rows_agree(run: Path) -> tuple[int, int]:
    from harness.runs.formats import read_samples

    return len(read_samples(run)), json.loads((run / "meta.json").read_text())["segments"][-1]["rows"]


def test_a_file_size_limit_mid_row_leaves_meta_rows_exact(tmp_path):
    """A real short write (RLIMIT_FSIZE in a child process): the torn row is cut back, the error names the file,
    and samples.csv holds exactly the rows meta.json counts."""
    done = subprocess.run(
        [sys.executable, "-c", SHORT_WRITE, str(tmp_path / "run")], capture_output=True, text=True, cwd=REPO, timeout=60
    )
    appended, message = done.stdout.split(" ", 1)
    assert done.returncode == 0 and "samples.csv: cannot append a row" in message, done.stdout + done.stderr
    assert _rows_agree(tmp_path / "run") == (int(appended), int(appended))


def test_a_meta_json_that_cannot_be_written_takes_its_row_back(tmp_path, monkeypatch):
    """Disk full between a row and meta.json (a fake writer: meta.json cannot be written from row 3 on): the row
    is taken back, so the counts still agree."""
    from harness.runs import rundir

    real, calls = rundir.RunDirectory.write_record, []

    def flaky(self, record):
        calls.append(1)
        if len(calls) >= 4:  # the start, rows 1 and 2; from row 3 on the disk stays full
            raise InputError(str(self.meta_path), "", "cannot write: No space left on device")
        return real(self, record)

    monkeypatch.setattr(rundir.RunDirectory, "write_record", flaky)
    row = {"backend": "cpu", "device": "d", "model": "m", "dff": 1024, "arm": "fused", "tok_s": 5.0, "status": "ok"}
    with pytest.raises(InputError, match="No space left"), rundir.SampleWriter(tmp_path / "run", {}) as writer:
        for index in range(5):
            writer.append({**row, "round": index})
    assert _rows_agree(tmp_path / "run") == (2, 2)


@pytest.mark.skipif(importlib.util.find_spec("ray") is None, reason="the 'fleet' extra (make test installs it)")
def test_a_driver_the_cluster_refuses_for_its_token_is_told_so(monkeypatch):
    """Ray 2.60 with a token-authenticated head: a driver without RAY_AUTH_MODE=token gets a bare ConnectionError,
    and the cause appears only in Ray's C++ log line (seen on this box; here the same two things, faked, so no
    cluster starts). The error line names the token and what to do."""
    import ray

    from harness.measure import ray_workers

    def refused(**kwargs):
        os.write(
            2,
            b"gcs_client.cc:210: Failed to get cluster ID from GCS server: Unauthenticated: RPC error: "
            b"InvalidAuthToken: Authentication token is missing or incorrect\n",
        )
        raise ConnectionError("Failed to connect to Ray cluster at 192.0.2.2:26399")

    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", refused)
    monkeypatch.setattr(ray_workers, "check_reachable", lambda address: None)
    with pytest.raises(InputError, match="token authentication and refused this driver's token") as caught:
        ray_workers.connect(ray, "192.0.2.2:26399")
    assert "RAY_AUTH_MODE=token" in str(caught.value) and "\n" not in str(caught.value)
    monkeypatch.setattr(ray, "init", lambda **kwargs: (_ for _ in ()).throw(ConnectionError("no head")))
    with pytest.raises(InputError, match="cannot join the Ray cluster: no head$"):
        ray_workers.connect(ray, "192.0.2.2:26399")


def test_check_reports_never_reads_raw_data_outside_what_it_was_given(tmp_path):
    """A committed sidecar naming a file elsewhere as its raw data (absolute, `../` past the tree, a link in the
    tree to a file outside, a non-CSV file inside): check-reports says so and fails, and never reads or quotes it."""
    from harness.output.report_data import sidecar_path
    from harness.output.report_files import write_report

    project, elsewhere = tmp_path / "project", tmp_path / "elsewhere"
    (project / "reports").mkdir(parents=True)
    (project / "pyproject.toml").write_text("")
    elsewhere.mkdir()
    secret = elsewhere / "secret.csv"
    secret.write_text("model,SECRET-TOKEN-1234\nx,1\n")
    run = write_run(project / "results" / "run", synthetic_samples(linear_curve([1024, 4096], 5000), seed=9))
    md_path, _, _ = write_report(run, project / "reports")
    sidecar = json.loads(sidecar_path(md_path).read_text())
    (project / "results" / "planted.csv").symlink_to(secret)
    (project / ".env").write_text("SECRET-TOKEN-5678=1\n")  # inside the project, but no raw data
    outside = "lies outside the addendum's project"
    for raw, problem in (
        (str(secret), outside),
        ("../elsewhere/secret.csv", outside),
        ("results/planted.csv", outside),
        (".env", "is neither a run directory nor a CSV"),
    ):
        sidecar_path(md_path).write_text(json.dumps({**sidecar, "raw_data": raw}))
        done = cli("check-reports", project / "reports", cwd=project)
        assert done.returncode == 1 and problem in done.stdout, done.stdout + done.stderr
        assert "SECRET-TOKEN" not in done.stdout + done.stderr
