"""`moecal bisect`: which mlxcel commit changed the decision — reproduce first, then bisect.

As Chromium's bisect does, the two ends are built and measured again before anything else: a change seen between
two stored sweeps may be the machine or the day, not a commit, and bisecting a change that does not reproduce
names a random commit. The ends are compared with `moecal check`'s gate
(harness.analysis.comparison.regression.check_runs, its throughput threshold lifted: this names decision changes, not
slower builds); when it passes, the change does not reproduce and nothing is bisected.

Otherwise the commits between them (`git rev-list --ancestry-path GOOD..BAD`, oldest first) are bisected: each
step checks out a commit, runs the build command with `{rev}` replaced by the full hash (in the tree's folder),
and sweeps only the points the decision turns on (those whose verdict differs between the ends, and each end's
decision-test points: harness.analysis.decision.decision_json's `decides`), then reads the same gate against the good
end's run on those points (check_runs joins the points both runs have and decides on those alone). A commit whose
decision agrees with the good end moves the lower bound, any other the upper one; the first commit whose decision
differs is named after ⌈log2 n⌉ builds for n commits. The tree must be clean (a checkout would carry or lose
uncommitted work) and is put back on the commit or branch it was on, whatever happens.
"""

from __future__ import annotations

import shlex
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from harness.analysis.comparison.regression import CheckResult, check_runs
from harness.analysis.decision.pipeline import analyse_path
from harness.errors import InputError

NO_THROUGHPUT_GATE = 0.99  # check_runs' largest threshold: only a changed decision fails the gate


@dataclass
class BisectResult:
    status: str  # "does not reproduce" | "found"
    first_bad: str | None = None
    builds: list[str] = field(default_factory=list)  # every rev built, in order (the two ends first)
    points: list[str] = field(default_factory=list)  # the models measured between the ends
    verdicts: dict[str, str] = field(default_factory=dict)  # rev → "good" | "bad"
    problems: list[str] = field(default_factory=list)  # why the ends differ (check's lines)


def _git(tree: Path, *args: str) -> str:
    done = subprocess.run(["git", "-C", str(tree), *args], capture_output=True, text=True)
    if done.returncode != 0:
        raise InputError(str(tree), f"git {args[0]}", done.stderr.strip().splitlines()[-1] if done.stderr else "failed")
    return done.stdout.strip()


def _commit(tree: Path, rev: str, option: str) -> str:
    done = subprocess.run(
        ["git", "-C", str(tree), "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}"],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        raise InputError(option, rev, f"not a commit of {tree}")
    return done.stdout.strip()


def commits_between(tree: Path, good: str, bad: str) -> tuple[str, list[str]]:
    """The good end's full hash and the commits after it up to bad (oldest first; bad last)."""
    good_rev, bad_rev = _commit(tree, good, "--good"), _commit(tree, bad, "--bad")
    revs = _git(tree, "rev-list", "--reverse", "--ancestry-path", f"{good_rev}..{bad_rev}").split()
    if not revs or revs[-1] != bad_rev:
        raise InputError("--bad", bad, f"is not a descendant of --good {good}")
    return good_rev, revs


class Tree:
    """An mlxcel checkout moved between commits and put back where it was."""

    def __init__(self, path: Path, build: str):
        self.path, self.build = Path(path), build
        if "{rev}" not in build:
            raise InputError("--build", build, "must contain {rev} (replaced by each commit's hash)")
        if _git(self.path, "status", "--porcelain", "--untracked-files=no"):
            raise InputError(str(self.path), "git status", "uncommitted changes: commit or stash them first")
        branch = subprocess.run(
            ["git", "-C", str(self.path), "symbolic-ref", "-q", "--short", "HEAD"], capture_output=True, text=True
        ).stdout.strip()
        self.home = branch or _git(self.path, "rev-parse", "HEAD")

    def build_at(self, rev: str) -> None:
        _git(self.path, "checkout", "--quiet", "--detach", rev)
        command = self.build.replace("{rev}", rev)
        done = subprocess.run(command, shell=True, cwd=self.path, capture_output=True, text=True)
        if done.returncode != 0:
            tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
            raise InputError("--build", command, f"exit {done.returncode} at {rev[:12]}: {tail[0]}")

    def restore(self) -> None:
        _git(self.path, "checkout", "--quiet", self.home)


def sweep_command(config: Path, out: Path, rounds: int | None, only: Sequence[str]) -> list[str]:
    """`moecal sweep` as a child process: the sweep takes the host lock and writes its run as any sweep does."""
    argv = [sys.executable, "-m", "harness", "sweep", str(config), "--out", str(out), "--no-report"]
    argv += ["--rounds", str(rounds)] if rounds is not None else []
    for model in only:
        argv += ["--only", model]
    return argv


def run_sweep(config: Path, out: Path, rounds: int | None, only: Sequence[str]) -> Path:
    done = subprocess.run(sweep_command(config, out, rounds, only), capture_output=True, text=True)
    if done.returncode != 0:
        lines = (done.stderr or done.stdout).strip().splitlines() or ["no output"]
        raise InputError(str(config), "sweep", f"{shlex.join(sweep_command(config, out, rounds, only))}: {lines[-1]}")
    return out


def _check(base: Path, run: Path) -> CheckResult:
    """check's gate between two runs (the current run may hold fewer points: they are decided on alone), strict:
    a bisect looks for any change of the decision, a raise the later build supports as much as a lower."""
    return check_runs(analyse_path(base), analyse_path(run), NO_THROUGHPUT_GATE, allow_missing=True, strict=True)


def decision_problems(base: Path, run: Path) -> list[str]:
    """Why the gate fails ([] when the two runs' decisions agree); an incomparable pair is an error."""
    result = _check(base, run)
    if result.status == "incomparable":
        raise InputError(str(run), "points", "; ".join(result.problems) + f" (against {base})")
    return result.problems


def deciding_models(good: Path, bad: Path) -> list[str]:
    """The models the decision turns on: a verdict that differs between the ends, a decision test at either, or the
    cap either end recommends (a lower lands on a measured point, which must stay measured)."""
    models = {str(p["model"]) for p in _check(good, bad).points if p["verdict_before"] != p["verdict_after"]}
    for run in (good, bad):
        decision = analyse_path(run).as_json()
        cap = decision["recommended_cap"]
        models |= {
            str(p["model"])
            for p in decision["points"]
            if p.get("decides") or p.get("decision_test") or (p["dff"] == cap and p["verdict"] != "null")
        }
    return sorted(models)


def bisect(
    revs: Sequence[str],
    good_rev: str,
    build: Callable[[str], None],
    sweep: Callable[[str, Sequence[str]], Path],
    differs: Callable[[Path, Path], list[str]],
    turning_points: Callable[[Path, Path], list[str]],
    say: Callable[[str], None] = lambda line: None,
) -> BisectResult:
    """Reproduce at both ends (all points), then bisect `revs` (oldest first, the bad end last) sweeping only the
    turning points; `differs(base, run)` is the gate's list of problems ([] when the decisions agree). A commit
    whose turning points agree with both ends (fewer points, wider intervals) is swept again in full, unbuilt."""
    bad_rev = revs[-1]
    result = BisectResult("found")
    runs = {}
    for rev in (good_rev, bad_rev):
        build(rev)
        result.builds.append(rev)
        runs[rev] = sweep(rev, ())
    good_run, bad_run = runs[good_rev], runs[bad_rev]
    result.problems = differs(good_run, bad_run)
    if not result.problems:
        result.status = "does not reproduce"
        say(f"does not reproduce: {good_rev[:12]} and {bad_rev[:12]} agree under the check gate")
        return result
    result.points = turning_points(good_run, bad_run)
    say(f"reproduced ({'; '.join(result.problems)}); bisecting {len(revs) - 1} commits on {', '.join(result.points)}")
    low, high = -1, len(revs) - 1  # revs[low] agrees with good (-1: the good end), revs[high] differs
    while high - low > 1:
        mid = (low + high) // 2
        build(revs[mid])
        result.builds.append(revs[mid])
        run = sweep(revs[mid], result.points)
        bad = bool(differs(good_run, run))
        if not bad and not differs(bad_run, run):
            say(f"{revs[mid][:12]}: the turning points agree with both ends; sweeping every point")
            run = sweep(revs[mid], ())
            bad = bool(differs(good_run, run))
        result.verdicts[revs[mid]] = "bad" if bad else "good"
        say(f"{revs[mid][:12]}: {'decision differs' if bad else 'decision agrees with the good end'}")
        low, high = (low, mid) if bad else (mid, high)
    result.first_bad = revs[high]
    return result


def run_bisect(
    tree: Tree,
    good: str,
    bad: str,
    config: Path,
    out: Path,
    rounds: int | None = None,
    say: Callable[[str], None] = lambda line: None,
) -> BisectResult:
    """Bisect `tree` between `good` and `bad`, one run directory per built commit under `out`."""
    good_rev, revs = commits_between(tree.path, good, bad)

    def build(rev: str) -> None:
        say(f"build {rev[:12]}")
        tree.build_at(rev)

    def sweep(rev: str, only: Sequence[str]) -> Path:
        folder = Path(out) / (rev[:12] if only or rev in (good_rev, revs[-1]) else f"{rev[:12]}-all")
        return run_sweep(config, folder, rounds, only)

    try:
        return bisect(revs, good_rev, build, sweep, decision_problems, deciding_models, say)
    finally:
        tree.restore()
