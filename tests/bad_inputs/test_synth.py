"""Bad inputs of `moecal synth`: layouts, shard sizes and disks that fill, partial folders left behind."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.bad_inputs.corpus import assert_case, one_error_line
from tests.support.helpers import cli
from tests.support.synth_sources import source_folder

LAYOUT_KEYS = ("num_attention_heads", "num_key_value_heads", "head_dim", "vocab_size", "num_hidden_layers")


BAD_VALUES = {"missing": None, "zero": 0, "negative": -4, "fraction": 2.5, "text": "many"}


# (id, argv with {ws}, {config} and {out} placeholders, exit code, text the one error line must contain)
CASES = [
    (
        "synth-like-link-out",
        ["synth", "--like", "{ws}/synth-src/mixtral-tiny", "--dff", "64", "--out", "{out}/s"],
        2,
        "tokenizer_config.json: --like: is a symbolic link out of the model folder",
    ),
]


@pytest.mark.parametrize(("argv", "code", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_is_one_error_line(ws, outside, tmp_path, argv, code, expected):
    """`{out}` is the case's own output folder (a fresh tmp folder): everything else must stay as it was."""
    assert_case(ws, outside, tmp_path, argv, code, expected)


@pytest.mark.parametrize("key", LAYOUT_KEYS)
@pytest.mark.parametrize("kind", list(BAD_VALUES))
def test_synth_refuses_a_bad_layout_key(tmp_path, key, kind):
    if kind == "missing" and key in ("num_key_value_heads", "head_dim"):
        pytest.skip("optional keys: missing means the family's default")
    source = source_folder(tmp_path, "qwen3_moe")
    config = json.loads((source / "config.json").read_text())
    if BAD_VALUES[kind] is None:
        config.pop(key)
    else:
        config[key] = BAD_VALUES[kind]
    (source / "config.json").write_text(json.dumps(config))
    done = cli("synth", "--like", source, "--dff", "64", "--out", tmp_path / "out", "--dry-run")
    one_error_line(done, key)


@pytest.mark.parametrize("value", ["inf", "nan", "1e300"])
def test_synth_refuses_a_shard_size_that_is_no_size(tmp_path, value):
    source = source_folder(tmp_path, "mixtral")
    done = cli("synth", "--like", source, "--dff", "64", "--out", tmp_path / "out", "--shard-gb", value)
    one_error_line(done, "--shard-gb")


def test_synth_refuses_ten_million_layers_in_the_plan(tmp_path):
    source = source_folder(tmp_path, "mixtral", num_hidden_layers=10**7)
    done = cli("synth", "--like", source, "--dff", "64", "--out", tmp_path / "out", "--dry-run")
    one_error_line(done, "num_hidden_layers: 10000000 layers: at most")


def test_a_disk_that_fills_mid_write_is_one_line_naming_the_checkpoint(tmp_path):
    """RLIMIT_FSIZE stands in for a full disk: the write fails part-way through the shards (MLX: RuntimeError)."""
    source = source_folder(tmp_path, "qwen3_moe")
    out = tmp_path / "out"
    limit = "import resource, runpy, sys; resource.setrlimit(resource.RLIMIT_FSIZE, (2048, 2048)); "
    argv = ["synth", "--like", str(source), "--dff", "64", "--out", str(out), "--dtype", "float32"]
    code = limit + f"sys.argv = ['moecal', *{argv!r}]; runpy.run_module('harness', run_name='__main__')"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    one_error_line(done, f"{out / 'qwen3_moe-tiny-dff64'}: not written, nothing kept")
    assert ".partial-" not in done.stderr and os.listdir(out) == []


def test_a_killed_synths_partial_folder_is_removed_by_the_next(tmp_path):
    source = source_folder(tmp_path, "qwen3_moe")
    out = tmp_path / "out"
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    stale = out / f".qwen3_moe-tiny-dff64.partial-{dead.stdout.strip()}"
    stale.mkdir(parents=True)
    (stale / "shard-00000.part.safetensors").write_bytes(b"half")
    live = out / f".qwen3_moe-tiny-dff64.partial-{os.getppid()}"  # a running process (in-process, getpid is ours)
    live.mkdir()
    dry = cli("synth", "--like", source, "--dff", "64", "--out", out, "--dry-run")
    assert dry.returncode == 0 and f"would remove {stale.name}" in dry.stdout and stale.exists()
    done = cli("synth", "--like", source, "--dff", "64", "--out", out, "--dtype", "float32")
    assert done.returncode == 0, done.stderr
    assert f"removed {stale.name}" in done.stdout and not stale.exists()
    assert f"kept {live.name}: its synth process is still running" in done.stdout and live.exists()
