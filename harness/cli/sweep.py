"""`moecal sweep CONFIG`: run interleaved fused/fallback measurements into a new results/<run-id>/ (or `--resume`)."""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import sys
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table

from harness.cli.analysis_options import JsonOpt
from harness.config import resources
from harness.errors import InputError
from harness.json_output import finite
from harness.measure import noise_check

if TYPE_CHECKING:  # imported when the command runs, not for its --help (tests/test_help.py)
    import pandas as pd

    from harness.measure.sweep_setup import PreparedSweep


def _console(stderr: bool = False) -> Console:
    """Paths and messages stay on one line; a log or a pipe (no terminal, no COLUMNS) gets a 200-column table
    rather than rich's 80, so model names are neither cut nor folded into slivers."""
    stream = sys.stderr if stderr else sys.stdout
    wide = not stream.isatty() and not os.environ.get("COLUMNS")
    return Console(stderr=stderr, soft_wrap=True, width=200 if wide else None)


console = _console(stderr=True)


PROGRESS_COLUMNS = (
    TextColumn("{task.description}"),
    BarColumn(),
    MofNCompleteColumn(),
    TimeElapsedColumn(),
    TextColumn("ETA"),
    TimeRemainingColumn(),
)


def _tokens_cell(fallback: float, fused: float) -> str:
    """`fallback/fused` generated tokens, flagged when the arms generated different counts (different work)."""
    if fallback != fallback and fused != fused:
        return "-"
    cell = "/".join(f"{n:g}" if n == n else "-" for n in (fallback, fused))
    return cell + (" tokens differ" if fallback == fallback and fused == fused and fallback != fused else "")


def _kind_suffix(workload: str) -> str:
    """` (decode)`: a built-in whole-model kind names itself, since a layer config's decode block shares the layer
    rows' model names (an external benchmark's rows are its models already)."""
    from harness.config.schema import kind_meaning

    meaning = kind_meaning(workload)
    return f" ({workload})" if meaning.whole_model and not meaning.external else ""


def quick_table_view(run_dir: Path, quick: pd.DataFrame) -> Table:
    """The final table of `quick` (harness.measure.sweep_loop.quick_table of the run)."""
    table = Table(title=f"{run_dir} (median tok/s; ratio: geometric-mean fused/fallback, as in the addendum)")
    columns = ("model", "d_model", "dff", "fallback", "fused", "ratio", "tokens", "dispatch", "ok", "fail", "skip")
    for column in columns:
        # a model name folds onto a second line, never cut to "…" (a log or a pipe is 80 columns wide)
        table.add_column(
            column, justify="left" if column in ("model", "tokens", "dispatch") else "right", overflow="fold"
        )
    for row in quick.to_dict("records"):
        table.add_row(
            str(row["model"]) + _kind_suffix(str(row["workload"])),
            str(int(row["d_model"])) if row["d_model"] else "",
            str(int(row["dff"])),
            *(f"{row[arm]:.4g}" if row[arm] == row[arm] else "-" for arm in ("fallback", "fused")),
            f"{row['ratio']:.4f}" if row["ratio"] == row["ratio"] else "-",
            _tokens_cell(row["tokens_fallback"], row["tokens_fused"]),
            str(row["dispatch"]),
            *(str(int(row[status])) for status in ("ok", "fail", "skip")),
        )
    return table


def sweep(
    config: Path | None = typer.Argument(
        None, help="Sweep config (YAML file or preset name: moecal presets). Default: the preset for this machine."
    ),
    out: Path | None = typer.Option(
        None,
        "--out",
        help="Directory of a new run (default results/<yyyymmddThhmm>-<backend>-<device>-<config>); "
        "it must not hold a run already.",
    ),
    resume: str | None = typer.Option(
        None,
        "--resume",
        help="Continue a run instead of starting one: bare --resume takes the newest unfinished run of this config "
        "on this device under results/; --resume DIR that run.",
        show_default=False,
    ),
    dry_run: bool = typer.Option(
        False, "--dry-run", help="Validate config, backend and binaries; print the plan; run nothing."
    ),
    rounds: int | None = typer.Option(None, "--rounds", min=1, help="Override measure.rounds."),
    only: list[str] = typer.Option([], "--only", help="Measure only this model (repeatable)."),
    backend: str | None = typer.Option(None, "--backend", help="Override the config's backend (metal|cuda|cpu|auto)."),
    allow_mixed: bool = typer.Option(
        False,
        "--allow-mixed",
        help="With --resume: continue even though the kernel sources or launch settings changed (recorded).",
    ),
    report: bool = typer.Option(
        True, "--report/--no-report", help="After the sweep: summarize → crossover → addendum + plot."
    ),
    report_dir: Path | None = typer.Option(
        None, "--report-dir", help="Where the addendum and plot go (default: the run directory).", show_default=False
    ),
    measure_null: bool = typer.Option(
        False, "--measure-null", help="Also run models whose config says expect_null (they stay null points)."
    ),
    workers: str | None = typer.Option(
        None,
        "--workers",
        help="Spread the points over N Ray workers on this node (N or auto), one device each: one GPU per worker on "
        "cuda; on cpu the workers share the cores, so their timings interfere. Needs the 'fleet' extra.",
    ),
    until_decided: bool = typer.Option(
        False,
        "--until-decided",
        help="After the first pass (--rounds, default measure.rounds), add rounds only where they can still change "
        "the decision, until it is settled, the budget is spent or no affordable round can change it "
        "(measure.until_decided).",
    ),
    max_rounds: int | None = typer.Option(
        None, "--max-rounds", min=1, help="With --until-decided: the most rounds per point (measure.max_rounds)."
    ),
    budget: str | None = typer.Option(
        None,
        "--budget",
        help="With --until-decided: device time for the whole sweep, e.g. 900, 15m, 1h30m (measure.budget).",
    ),
    as_json: JsonOpt = False,
) -> None:
    """Run the sweep: per point, warm-up, then rounds in which every arm runs once in rotating order.

    Every run is appended to samples.csv as soon as it finishes; `--resume` continues where a killed sweep
    stopped (completed (point, arm, round) rows are not repeated).
    """
    from harness.cli.plan import print_plan
    from harness.errors import BackendUnavailable
    from harness.measure import guard, sweep_setup
    from harness.measure import sweep_loop as sweeps

    if config is None and resume:  # --resume DIR: the run's own config, never this machine's preset
        config = _recorded_config(Path(resume))
        console.print(f"config: {config} (recorded in {Path(resume) / 'meta.json'})")
    if config is None:
        try:
            config = sweep_setup.default_config()
        except BackendUnavailable as exc:
            raise InputError("(no config given)", "backend", str(exc)) from None
        console.print(f"config: {config} (the default for this machine)")
    config = resources.config_argument(config)
    if workers is not None:
        from harness.measure import ray_workers as scale

        scale.parse_workers(workers)
        scale.require_ray("--workers")
    plan = sweep_setup.prepare(
        config,
        out=out,
        backend=backend,
        only=only,
        rounds=rounds,
        resume=resume,
        allow_mixed=allow_mixed,
        measure_null=measure_null,
        write_checkpoints=not dry_run,
    )
    _until_decided_options(plan, until_decided, max_rounds, budget)
    if dry_run:
        if as_json:  # the plan as data, like `moecal plan --json`: one JSON object on stdout, nothing else there
            from harness.cli.plan import plan_record

            _emit({"dry_run": True, "run_dir": str(plan.run_dir), **plan_record(plan)}, as_json)
            return
        print_plan(plan)
        console.print(f"dry run: config, backend and commands are usable; would write {plan.run_dir}")
        return
    todo = sweep_setup.pending(plan)
    if not (todo or plan.config.measure.until_decided):  # the allocation may add rounds beyond the first pass
        console.print(f"run directory: {plan.run_dir}  (0 runs to do)")
        _finish(plan, written=0, report=report, report_dir=report_dir, as_json=as_json)
        return
    with sweeps.writing(plan), _resume_hint(plan.run_dir):  # the lock is held through the summary and addendum
        console.print(f"run directory: {plan.run_dir}  ({todo} runs to do)")
        busy = noise_check.advice(noise_check.findings())
        if busy:
            console.print(busy, highlight=False, markup=False)
        with Progress(*PROGRESS_COLUMNS, console=console, transient=False) as progress:
            task = progress.add_task("sweep", total=todo)

            def on_run(message: str) -> None:
                progress.update(task, advance=1, description=message[:60])

            def say(message: str) -> None:
                progress.console.print(message, highlight=False, markup=False)

            with guard.sweep_hold(getattr(plan.workload, "guard", None), _rocm_host(plan), say) as held:
                say(f"guard: {held}")
                written = sweeps.execute(plan, on_run, workers, say)
        _finish(plan, written, report, report_dir, as_json)


def _rocm_host(plan: PreparedSweep) -> bool:
    """Whether the sweep shares mlxcel's ROCm guard lock: a rocm run, or a host with the ROCm KFD driver."""
    from harness.measure.guard_probes import KFD_PROC_DIR

    return plan.meta.get("backend") == "rocm" or Path(KFD_PROC_DIR).is_dir()


def _until_decided_options(plan: PreparedSweep, on: bool, max_rounds: int | None, budget: str | None) -> None:
    """--until-decided, --max-rounds and --budget over the config's measure block (validated like the config)."""
    from harness.config.duration import parse_duration

    measure = plan.config.measure
    if not (on or measure.until_decided) and (max_rounds is not None or budget is not None):
        raise InputError("--max-rounds/--budget", "", "only apply with --until-decided (or measure.until_decided)")
    update: dict[str, object] = {"until_decided": on or measure.until_decided}
    if max_rounds is not None:
        update["max_rounds"] = max_rounds
    if budget is not None:
        try:
            parse_duration(budget)
        except ValueError as exc:
            raise InputError("--budget", budget, str(exc)) from None
        update["budget"] = budget
    measure = measure.model_copy(update=update)
    if measure.until_decided:
        from harness.measure.allocation import check_max_rounds

        where = "--max-rounds" if max_rounds is not None else "measure.max_rounds"
        check_max_rounds(measure.max_rounds, len(plan.points), where)
    if measure.until_decided and measure.max_rounds < plan.plan.rounds:
        raise InputError("--max-rounds", str(measure.max_rounds), f"must be >= the first pass ({plan.plan.rounds})")
    if measure.until_decided and plan.config.knobs:  # the allocation looks at one setting's points (config/schema.py)
        raise InputError("--until-decided", "", "cannot be combined with knobs: a knob sweep runs fixed rounds")
    plan.config = plan.config.model_copy(update={"measure": measure})


def _recorded_config(run_dir: Path) -> Path:
    """The config a run was started with (meta.json's `config_path`), for `--resume DIR` without CONFIG."""
    from harness.runs.rundir import RunDirectory

    run = RunDirectory(run_dir)
    if not run.is_run():
        raise InputError(str(run_dir), "--resume", "not a run directory (no samples.csv or meta.json)")
    recorded = run.read_meta().get("config_path")
    if not isinstance(recorded, str) or not recorded:
        raise InputError(
            str(run.meta_path), "config_path", "not recorded: give the config, `moecal sweep CONFIG --resume DIR`"
        )
    if not Path(recorded).is_file():
        raise InputError(
            str(run.meta_path),
            "config_path",
            f"{recorded} no longer exists: give the config, `moecal sweep CONFIG --resume DIR`",
        )
    return Path(recorded)


def resume_command(argv: list[str], run_dir: Path) -> str:
    """The command line that continues this sweep: the same words, with `--out X` and any `--resume [DIR]`
    replaced by `--resume RUN_DIR` (a bare --resume takes no value: the word after it is kept unless it is a
    folder)."""
    words: list[str] = []
    index = 0
    while index < len(argv):
        word = argv[index]
        index += 1
        if word == "--out":
            index += 1
        elif word == "--resume":
            if index < len(argv) and not argv[index].startswith("-") and Path(argv[index]).is_dir():
                index += 1
        elif not word.startswith(("--out=", "--resume=")):
            words.append(word)
    return shlex.join(["moecal", *words, "--resume", str(run_dir)])


@contextlib.contextmanager
def _resume_hint(run_dir: Path) -> Iterator[None]:
    """Ctrl-C (or SIGTERM/SIGHUP) while measuring: the error line ends with the exact command that resumes (or,
    before the first row, the command that starts again)."""
    from harness.cli.app import Terminated

    try:
        yield
    except (KeyboardInterrupt, Terminated) as exc:
        from harness.runs.rundir import RunDirectory

        if RunDirectory(run_dir).is_run():
            exc.add_note(f"resume with: {resume_command(sys.argv[1:], run_dir)}")
        else:
            exc.add_note(f"nothing was recorded yet; start again with: {shlex.join(['moecal', *sys.argv[1:]])}")
        raise


def _finish(plan: PreparedSweep, written: int, report: bool, report_dir: Path | None, as_json: bool = False) -> None:
    """The final table, then summary + addendum + plot when this sweep measured something new. With --json the
    result is one JSON object on stdout (the run's files and the decision) and everything else goes to stderr.

    The run is read and analysed once, here, at the options the report records; the table, summary.csv, the
    addendum and the mlxcel CSV are all of that one analysis (tests/test_one_analysis.py counts)."""
    from harness.analysis.decision.pipeline import analyse, save_summary
    from harness.analysis.points.inputs import load_input
    from harness.analysis.rounds.run_options import recorded_options
    from harness.measure import sweep_loop as sweeps
    from harness.output.addendum.knob_report import write_knob_report
    from harness.output.report_files import write_report
    from harness.runs.provenance_keys import UNTIL_DECIDED
    from harness.runs.rundir import RunDirectory

    run = RunDirectory(plan.run_dir)
    result: dict[str, object] = {"run_dir": str(plan.run_dir), "runs_written": written}
    no_result = sweeps.why_no_result(plan.run_dir)
    if no_result:  # nothing to summarize: an addendum would state a decision no measurement supports
        message, failed = no_result
        if failed:
            print(f"error: {run.samples}: {message}", file=sys.stderr)
            _emit({**result, "error": message}, as_json)  # --json still answers with an object (exit code 1)
            raise typer.Exit(1)
        console.print(f"{run.samples}: {message}: nothing to summarize or report")
        _emit({**result, "note": f"{message}: nothing to summarize or report"}, as_json)
        return
    # the run's policy (the targets its config set) at the level its until-decided looks read, where it has one
    # (docs/design.md §7): the one reader every later analysis of the run defaults through
    options = recorded_options(plan.run_dir, at_look_level=True)
    allocation = run.read_meta().get(UNTIL_DECIDED)
    analysis = analyse(load_input(plan.run_dir), options)
    quick = sweeps.quick_table(plan.run_dir, analysis.summary)
    (console if as_json else _console()).print(quick_table_view(plan.run_dir, quick))
    result["physics"] = _physics(plan, quick)
    result["samples"] = str(run.samples)
    console.print(f"samples:  {run.samples}\nmeta:     {run.meta_path}")
    if not written:
        console.print(f"nothing new measured: no file changed (`moecal report {plan.run_dir}` re-reports it)")
        _emit({**result, "note": "nothing new measured"}, as_json)
        return
    if isinstance(allocation, dict):
        console.print(
            f"until decided: {allocation['stop']} after {allocation['looks']} looks, {allocation['extra_runs']} runs "
            f"past the first pass, {allocation['spent_s'] / 60:.1f} min: {allocation['reason']}; the report reads "
            f"the decision at confidence {options.policy.confidence:.4f} (recorded in meta.json: later analyses of the "
            "run default to it)",
            highlight=False,
        )
        # the level the looks read, as `sweep --json` printed it before meta.json kept it once (in its policy)
        result["until_decided"] = {**allocation, "look_confidence": options.policy.confidence}
    if report:
        summary = save_summary(analysis, run.summary)
        md_path, png_path, decision, _ = write_report(
            plan.run_dir, report_dir or plan.run_dir, options=options, analysed=analysis
        )
        console.print(f"summary:  {summary}\naddendum: {md_path}\nplot:     {png_path}")
        console.print(f"decision: {decision.action} — {decision.reason}")
        if decision.apply:  # only where a variable sets the cap (a built-in run has none to set)
            console.print(f"apply:    {decision.apply}")
        result.update(summary=str(summary), addendum=str(md_path), plot=str(png_path), decision=asdict(decision))
        # a knob sweep: the crossover per setting and the joint choice, at the run's policy as `moecal report` reads it
        knobs = write_knob_report(plan.run_dir, md_path, options)
        if knobs:
            console.print(f"knobs:    {knobs[0]}\nknobs plot: {knobs[1]}")
            result.update(knobs=str(knobs[0]), knobs_plot=str(knobs[1]))
    failed = every_run_failed(run.read_samples())
    if failed:
        result["error"] = failed
    _emit(result, as_json)
    if failed:  # the others were reported; this model has no result at all, so the sweep did not do its job
        print(f"error: {run.samples}: {failed}", file=sys.stderr)
        raise typer.Exit(1)


def every_run_failed(samples: pd.DataFrame) -> str:
    """'' when every model has an ok run or none failed; else one line naming the first model whose every run
    failed, with its first error (skips, e.g. expect_null models, are not failures)."""
    names = []
    for model, rows in samples.groupby("model", sort=False):
        if not (rows["status"] == "ok").any() and (rows["status"] == "fail").any():
            names.append(str(model))
    if not names:
        return ""
    rows = samples[(samples["model"] == names[0]) & (samples["status"] == "fail")]
    others = f" (every run of {', '.join(map(repr, names[1:]))} failed too)" if names[1:] else ""
    line = f"model {names[0]!r}: all {len(rows)} runs failed{others}; first error: {rows['error'].iloc[0]}"
    return " ".join(line.split())[:600]


def _physics(plan: PreparedSweep, table: pd.DataFrame) -> dict[str, object]:
    """Bytes per decode token, implied GB/s and share of the device's bandwidth per point (`table`: the final
    table's medians); a point above the ceiling is a measurement error (harness.analysis.evidence.physics_prior).
    Printed, and returned for --json."""
    from harness.analysis import number_format
    from harness.analysis.evidence.physics_prior import NEAR_CEILING, predicted_crossover
    from harness.measure.physics_points import sweep_physics

    medians = {
        (str(r["model"]), int(r["dff"])): {"fused": float(r["fused"]), "fallback": float(r["fallback"])}
        for r in table.to_dict("records")
    }
    device = str(plan.meta.get("device") or "")
    physics, source = sweep_physics(plan.points, medians, device)
    for p in physics:
        shares = [
            f"{arm} {g:.0f} GB/s" + (f" ({p.fraction[arm]:.0%})" if arm in p.fraction else "")
            for arm, g in p.gbps.items()
        ]
        share = " ".join(shares)
        flag = f"  ABOVE THE CEILING ({', '.join(p.above_ceiling)}): a measurement error" if p.above_ceiling else ""
        console.print(
            f"bandwidth: {p.label} Dff {p.dff}: {p.bytes_per_token / 1e6:.1f} MB/token, {share}{flag}", highlight=False
        )
    predicted = predicted_crossover(physics)
    if physics:
        where = source or f"no bandwidth listed for {device!r}: GB/s only"
        guess = (
            f"; the fallback reaches {NEAR_CEILING:.0%} of it at Dff ≈ {number_format.dff(predicted)} "
            "(the predicted crossover)"
            if predicted
            else ""
        )
        console.print(f"bandwidth: {where}{guess}", highlight=False)
    return {
        "bandwidth_source": source,
        "predicted_crossover": predicted,
        "points": [
            {
                "point": p.label,
                "dff": p.dff,
                "bytes_per_token": p.bytes_per_token,
                "gbps": p.gbps,
                "fraction": p.fraction,
                "above_ceiling": p.above_ceiling,
            }
            for p in physics
        ],
    }


def _emit(result: dict[str, object], as_json: bool) -> None:
    if as_json:
        typer.echo(json.dumps(finite(result), indent=1, allow_nan=False))


def register(app: typer.Typer) -> None:
    app.command("sweep")(sweep)
