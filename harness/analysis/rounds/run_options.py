"""The analysis options a run's own policy asks for (harness.policy.Policy, recorded in meta.json by its sweep:
harness.runs.run_meta): what the sweep's measure-time decisions read (until-decided looks, refinement's next Dff),
and what a later analysis of the run defaults to, so both aim at the targets the config set rather than at the
module defaults. A run that recorded no policy (written before policies were, or not a sweep of ours) gets the
module defaults, as it always did."""

from __future__ import annotations

from pathlib import Path

from harness.analysis.decision.pipeline import Options
from harness.analysis.points.inputs import run_dir_of
from harness.policy import Policy
from harness.runs.rundir import RunDirectory


def recorded_options(run_dir: Path, current_default: int | None = None, at_look_level: bool = False) -> Options:
    """Options carrying the policy the run directory's meta.json records (the module defaults without one),
    everything else default: at its base level (measure time: the sweep's own looks and refinement), or
    `at_look_level`, the level its until-decided looks read where it recorded one (the sweep's end, as a later
    command reads it: harness.cli.analysis_options.build_options), so its report reads the decision the looks
    stopped on."""
    return policy_options(RunDirectory(run_dir).read_policy(), current_default, at_look_level)


def policy_options(policy: Policy | None, current_default: int | None = None, at_look_level: bool = False) -> Options:
    """recorded_options of a policy already read from meta.json (None: the run recorded none)."""
    if policy is None:
        return Options(current_default=current_default)
    return Options(policy=policy.at_look_level() if at_look_level else policy, current_default=current_default)


def input_policy(path: Path) -> Policy | None:
    """The policy recorded by the run an analysis input belongs to (a run directory, or its samples.csv or
    summary.csv: harness.analysis.points.inputs.run_dir_of); None for any other input or a run that recorded none."""
    run_dir = run_dir_of(Path(path))
    return RunDirectory(run_dir).read_policy() if run_dir is not None else None
