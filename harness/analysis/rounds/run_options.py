"""The analysis options a run's own policy asks for (harness.runs.run_meta.RunPolicy, recorded in meta.json by its
sweep): what the sweep's measure-time decisions read (until-decided looks, refinement's next Dff), and what a later
analysis of the run defaults to, so both aim at the targets the config set rather than at the module defaults.
A run that recorded no policy (written before policies were, or not a sweep of ours) gets the module defaults, as
it always did."""

from __future__ import annotations

from pathlib import Path

from harness.analysis.decision.pipeline import Options
from harness.analysis.points.inputs import run_dir_of
from harness.policy import Policy
from harness.runs.run_meta import RunPolicy
from harness.runs.rundir import RunDirectory


def policy_options(
    policy: RunPolicy | None, current_default: int | None = None, at_look_level: bool = False
) -> Options:
    """Options at `policy`'s confidence and margin (the module defaults without one); everything else default.
    `at_look_level`: the confidence of an until-decided sweep's looks where it recorded one (what its own report
    read the decision at), for an analysis after the sweep; the sweep's own looks and refinement use the base level."""
    if policy is None:
        return Options(current_default=current_default)
    level = policy.look_confidence if at_look_level and policy.look_confidence is not None else policy.confidence
    return Options(policy=Policy(confidence=level, margin=policy.margin), current_default=current_default)


def recorded_options(run_dir: Path, current_default: int | None = None, at_look_level: bool = False) -> Options:
    """policy_options of the policy the run directory's meta.json records: at its base level (measure time), or
    `at_look_level` (the sweep's end, as a later command reads it: harness.cli.analysis_options.build_options)."""
    return policy_options(RunDirectory(run_dir).read_policy(), current_default, at_look_level)


def input_policy(path: Path) -> RunPolicy | None:
    """The policy recorded by the run an analysis input belongs to (a run directory, or its samples.csv or
    summary.csv: harness.analysis.points.inputs.run_dir_of); None for any other input or a run that recorded none."""
    run_dir = run_dir_of(Path(path))
    return RunDirectory(run_dir).read_policy() if run_dir is not None else None
