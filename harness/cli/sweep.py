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

    from harness.measure.sweep_end import Bandwidth
    from harness.measure.sweep_setup import PreparedSweep
    from harness.output.report_files import WrittenReport


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
    from harness.measure import sweep_loop as sweeps
    from harness.measure import sweep_setup
    from harness.measure.protocol import RERUN_NOTE

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
        _print_end(plan, written=0, report=report, report_dir=report_dir, as_json=as_json)
        return
    with sweeps.writing(plan), _resume_hint(plan.run_dir):  # the lock is held through the summary and addendum
        console.print(f"run directory: {plan.run_dir}  ({todo} runs to do)")
        busy = noise_check.advice(noise_check.findings())
        if busy:
            console.print(busy, highlight=False, markup=False)
        with Progress(*PROGRESS_COLUMNS, console=console, transient=False) as progress:
            task = progress.add_task("sweep", total=todo)
            planned = todo

            def on_run(message: str) -> None:
                nonlocal planned  # a contended run's slot runs again: one run more to do (never "13/12")
                planned += message.endswith(RERUN_NOTE)
                progress.update(task, advance=1, total=planned, description=message[:60])

            def say(message: str) -> None:
                progress.console.print(message, highlight=False, markup=False)

            written = sweeps.run(plan, on_run, workers, say)
        _print_end(plan, written, report, report_dir, as_json)


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


def _print_end(plan: PreparedSweep, written: int, report: bool, report_dir: Path | None, as_json: bool = False) -> None:
    """The end of the sweep, printed: the final table, then summary + addendum + plot when this sweep measured
    something new. With --json the result is one JSON object on stdout (the run's files and the decision) and
    everything else goes to stderr.

    The run is read and analysed once (harness.measure.sweep_end.conclude), the files are written from that analysis
    (harness.output.sweep_result.finish); this prints each as it comes."""
    from harness.measure.sweep_end import NoResult, conclude
    from harness.output.sweep_result import finish

    end = conclude(plan, written)
    result: dict[str, object] = {"run_dir": str(plan.run_dir), "runs_written": written}
    measured = end.outcome
    if isinstance(measured, NoResult):
        message = measured.message
        if measured.failed:
            print(f"error: {end.samples}: {message}", file=sys.stderr)
            _emit({**result, "error": message}, as_json)  # --json still answers with an object (exit code 1)
            raise typer.Exit(1)
        console.print(f"{end.samples}: {message}: nothing to summarize or report")
        _emit({**result, "note": f"{message}: nothing to summarize or report"}, as_json)
        return
    (console if as_json else _console()).print(quick_table_view(plan.run_dir, measured.table))
    result["physics"] = _physics(measured.bandwidth)
    result["samples"] = str(end.samples)
    console.print(f"samples:  {end.samples}\nmeta:     {end.meta}")
    if not written:
        console.print(f"nothing new measured: no file changed (`moecal report {plan.run_dir}` re-reports it)")
        _emit({**result, "note": "nothing new measured"}, as_json)
        return
    allocation, options = measured.until_decided, measured.options
    if allocation is not None:
        console.print(
            f"until decided: {allocation['stop']} after {allocation['looks']} looks, {allocation['extra_runs']} runs "
            f"past the first pass, {allocation['spent_s'] / 60:.1f} min: {allocation['reason']}; the report reads "
            f"the decision at confidence {options.policy.confidence:.4f} (recorded in meta.json: later analyses of the "
            "run default to it)",
            highlight=False,
        )
        # the level the looks read, as `sweep --json` printed it before meta.json kept it once (in its policy)
        result["until_decided"] = {**allocation, "look_confidence": options.policy.confidence}
    done = finish(end, report=report, report_dir=report_dir, on_report=_print_report)
    if done.report:
        md_path, png_path, decision, _ = done.report
        result.update(summary=str(done.summary), addendum=str(md_path), plot=str(png_path), decision=asdict(decision))
    if done.knobs:
        console.print(f"knobs:    {done.knobs[0]}\nknobs plot: {done.knobs[1]}")
        result.update(knobs=str(done.knobs[0]), knobs_plot=str(done.knobs[1]))
    failed = measured.every_run_failed
    if failed:
        result["error"] = failed
    _emit(result, as_json)
    if failed:  # the others were reported; this model has no result at all, so the sweep did not do its job
        print(f"error: {end.samples}: {failed}", file=sys.stderr)
        raise typer.Exit(1)


def _print_report(summary: Path, report: WrittenReport) -> None:
    """The summary, addendum, plot and decision lines, as soon as they are written (before the knob report)."""
    md_path, png_path, decision, _ = report
    console.print(f"summary:  {summary}\naddendum: {md_path}\nplot:     {png_path}")
    console.print(f"decision: {decision.action} — {decision.reason}")
    if decision.apply:  # only where a variable sets the cap (a built-in run has none to set)
        console.print(f"apply:    {decision.apply}")


def _physics(bandwidth: Bandwidth) -> dict[str, object]:
    """Prints the bandwidth check of the final table (harness.measure.sweep_end.Bandwidth) and returns it for --json."""
    from harness.analysis import number_format
    from harness.analysis.evidence.physics_prior import NEAR_CEILING

    physics, source, predicted = bandwidth.points, bandwidth.source, bandwidth.predicted_crossover
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
    if physics:
        where = source or f"no bandwidth listed for {bandwidth.device!r}: GB/s only"
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
