"""`moecal bisect` on a fake mlxcel tree made here: 16 commits, each writing `crossover.txt`, which the SYNTHETIC
fake benchmark (tests/fixtures/fake_mlxcel_bench.py, via FAKE_MLXCEL_CROSSOVER_FILE) takes as its true crossover.
Commits before CHANGE carry 12000 (on cuda: keep 8192), from CHANGE on 5000 (fallback wins at Dff 6400: lower)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from harness.cli.app import app
from harness.measure.bisect import Tree, commits_between, run_bisect
from tests.support.fake_models import CONFIGS, text_generator_command, write_models

pytestmark = pytest.mark.slow  # 8 sweeps of the fake benchmark
COMMITS, CHANGE = 16, 11
MODELS = ("qwen3-30b-a3b-4bit", "phi-3.5-moe-4bit", "mixtral-8x7b-4bit", "gpt-oss-20b-mxfp4")  # the last: null


def _git(tree: Path, *args: str) -> str:
    command = ["git", "-C", str(tree), "-c", "user.name=test", "-c", "user.email=test@example.com", *args]
    return subprocess.run(command, check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("bisect")
    tree = root / "mlxcel"
    tree.mkdir()
    _git(tree, "init", "-q", "-b", "main")
    revs = []
    for i in range(COMMITS):
        (tree / "crossover.txt").write_text("12000\n" if i < CHANGE else "5000\n")
        (tree / "NOTES").write_text(f"commit {i}\n")  # every commit changes something
        _git(tree, "add", "-A")
        _git(tree, "commit", "-q", "-m", f"commit {i}")
        revs.append(_git(tree, "rev-parse", "HEAD"))
    config = root / "mlxcel.yaml"
    models = write_models(root, {name: CONFIGS[name] for name in MODELS})
    args = ["init", "--models", str(models), "--bench", text_generator_command(), "--out", str(config)]
    result = CliRunner().invoke(app, [*args, "--backend", "cuda"])
    assert result.exit_code == 0, result.output
    data = yaml.safe_load(config.read_text())
    data["workload"]["dispatch_check"]["enabled"] = False  # the dispatch pass is tested elsewhere; here it costs time
    # one pass: with two, the drift bound over a sweep of the 2-3 turning points widened their intervals so far that
    # 3 of 4 commits agreed with both ends and were swept again in full (the fallback bisect takes; measured here)
    data["measure"]["passes"] = 1
    config.write_text(yaml.safe_dump(data))
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("FAKE_MLXCEL_BACKEND", "cuda")
        patch.setenv("FAKE_MLXCEL_CROSSOVER_FILE", str(tree / "crossover.txt"))
        patch.setenv("FAKE_MLXCEL_NOISE_STATE", str(root / "noise-state"))
        yield root, tree, revs, config


def _bisect(setup, good: int, bad: int, name: str):
    root, tree, revs, config = setup
    log = root / f"{name}-builds.log"
    lines: list[str] = []
    result = run_bisect(
        Tree(tree, f"echo {{rev}} >> {log}"), revs[good], revs[bad], config, root / name, 3, lines.append
    )
    built = log.read_text().split()
    assert built == result.builds  # every build the command ran, and no other
    assert _git(tree, "symbolic-ref", "--short", "HEAD") == "main"  # the tree is back on its branch
    return result, built, lines


def test_bisect_names_the_commit_that_changed_the_crossover(setup):
    _, _, revs, _ = setup
    result, built, lines = _bisect(setup, 0, COMMITS - 1, "found")
    assert result.status == "found" and result.first_bad == revs[CHANGE], "\n".join(lines)
    assert built[:2] == [revs[0], revs[-1]]  # the ends, re-measured first
    assert len(built) - 2 <= 5  # the bisection's builds: ⌈log2 15⌉ = 4
    assert len(built) - 2 == 4
    assert result.verdicts == {rev: "bad" if revs.index(rev) >= CHANGE else "good" for rev in built[2:]}
    assert "mixtral-8x7b-4bit" not in result.points or "phi-3.5-moe-4bit" in result.points
    assert "gpt-oss-20b-mxfp4" not in result.points  # a null point turns no decision
    assert any(line.startswith("reproduced") for line in lines)


def test_ends_that_agree_do_not_reproduce(setup):
    _, _, revs, _ = setup
    result, built, lines = _bisect(setup, 0, CHANGE - 1, "same")
    assert result.status == "does not reproduce" and result.first_bad is None
    assert len(built) == 2 and any(line.startswith("does not reproduce") for line in lines)


def test_a_dirty_tree_and_a_build_without_rev_are_refused(setup, tmp_path):
    from harness.errors import InputError

    _, tree, revs, _ = setup
    with pytest.raises(InputError, match="not a commit of"):
        commits_between(tree, "no-such-tag", revs[-1])
    with pytest.raises(InputError, match="is not a descendant"):
        commits_between(tree, revs[5], revs[2])
    with pytest.raises(InputError, match=r"must contain \{rev\}"):
        Tree(tree, "make")
    (tree / "NOTES").write_text("uncommitted\n")
    try:
        with pytest.raises(InputError, match="uncommitted changes"):
            Tree(tree, "true {rev}")
    finally:
        _git(tree, "checkout", "--", "NOTES")
