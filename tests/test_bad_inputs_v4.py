"""Hardening v4 (items 4-6): no traceback, no hang, bounded resources and what a user meets first, through the real
CLI. Every input is SYNTHETIC, built in a tmp folder (tiny model folders, synthetic runs, small scripts standing in
for a benchmark); each refused case ends in one `error:` line with exit code 2 and no traceback."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from tests.helpers import cli
from tests.synth_sources import source_folder
from tests.synthetic_sweeps import SYNTHETIC_META, linear_curve, synthetic_samples, write_run


def _one_error_line(done, expected: str, code: int = 2) -> None:
    lines = done.stderr.strip().splitlines()
    assert done.returncode == code, done.stderr + done.stdout
    assert lines and lines[-1].startswith("error: "), done.stderr
    assert sum(line.startswith("error: ") for line in lines) == 1, done.stderr
    assert "Traceback" not in done.stderr + done.stdout, done.stderr
    assert expected in lines[-1], lines[-1]


LAYOUT_KEYS = ("num_attention_heads", "num_key_value_heads", "head_dim", "vocab_size", "num_hidden_layers")
BAD_VALUES = {"missing": None, "zero": 0, "negative": -4, "fraction": 2.5, "text": "many"}


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
    _one_error_line(done, key)
