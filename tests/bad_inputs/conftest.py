"""The bad-input workspace, built once for the corpus: every file the cases name (corpus.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.bad_inputs.corpus import (
    HOSTILE,
    MLXCEL_HEADER,
    SLEEPER,
    edited_config,
    hardening_v4,
    hostile_config,
    link_run,
    samples_with,
)
from tests.support.helpers import cli, fake_config
from tests.support.synthetic_sweeps import (
    DESIGN_EXAMPLE_CSV,
    linear_curve,
    synthetic_samples,
    write_run,
)


@pytest.fixture(scope="package")
def outside(tmp_path_factory) -> Path:
    """Files outside the workspace that symbolic links in it point to: no case may change them."""
    return tmp_path_factory.mktemp("outside")


@pytest.fixture(scope="package")
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
    samples_with(ws, "nan-tok-s", lambda r: r.update(tok_s="nan"))
    samples_with(ws, "zero-tok-s", lambda r: r.update(tok_s="0"))
    samples_with(ws, "inf-tok-s", lambda r: r.update(tok_s="inf"))
    samples_with(ws, "bad-arm", lambda r: r.update(arm="both"))
    samples_with(ws, "two-devices", lambda r: r.update(device="another device"))
    samples_with(ws, "no-dff", lambda r: r.update(dff=""))
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
    edited_config(ws, "cap-env-empty.yaml", workload(cap_env=""))
    edited_config(ws, "cap-env-equals.yaml", workload(cap_env="A=B"))
    edited_config(ws, "env-key-equals.yaml", workload(env={"X=Y": "1"}))
    edited_config(ws, "nul-model-name.yaml", model(name="a\x00b"))
    edited_config(ws, "nul-env-value.yaml", workload(env={"X": "a\x00b"}))
    edited_config(ws, "nul-command.yaml", workload(command=["bench\x00", "{dff}"]))
    edited_config(ws, "dff-boolean.yaml", model(dff=True))
    edited_config(ws, "dff-huge.yaml", model(dff=10**13))
    edited_config(ws, "d-model-boolean.yaml", model(d_model=False))
    edited_config(ws, "default-huge.yaml", lambda d: d.update(current_default=10**12))
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
    link_run(ws, outside, "link-samples", "samples.csv")
    link_run(ws, outside, "link-meta", "meta.json")
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
    hostile_config(ws, "leaves-a-child", "leaves-a-child.py", 5)
    hostile_config(ws, "never-exits", "never-exits.py", 1)
    (ws / "fleet-ok.yaml").write_text(yaml.safe_dump({"entries": [{"config": str(config), "where": {"hw_a": 1}}]}))
    hardening_v4(ws, outside, config)
    return ws
