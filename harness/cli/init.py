"""`moecal init --models DIR`: a ready command-workload config for calibrating mlxcel on the models found in DIR.

Every model folder becomes a model entry with its real shape (harness.config.discover) and, where mlxcel's fused kernel
should decline the checkpoint, `expect_null: <reason>` (harness.config.eligibility); folders without MoE layers are
listed as skipped, with the reason, in the file's header. The written config is validated before it is written, so what
`init` writes is what `moecal sweep` accepts.
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
import yaml

from harness.errors import InputError

if TYPE_CHECKING:  # imported when the command runs, not for its --help (tests/test_help.py)
    from harness.config.discover import DiscoveredModel, Skipped

DEFAULT_PROMPT = "Hello, how are you today?"
WARMUP_TOKENS = 20  # mlxcel-bench-decode's own default and the maintainers' protocol (design doc addenda)
HEADER = """\
# Written by `moecal init` from the model folders in {models}. Calibrates mlxcel's fused-MoE Dff cap with its
# own decode benchmark, by the maintainers' protocol (prompt, 100 decode tokens after a 20-token warm-up, one process
# per run): each arm is forced through {cap_env} (fused {fused}, fallback {fallback}).
# dispatch_check: before the timed rounds, one untimed fused-arm and one fallback-arm run per model with mlxcel's
#   in-kernel parity probe (MLXCEL_FUSED_MOE_PARITY_CHECK=1, threshold 0) show which path ran: `[fused-moe-parity]`
#   lines only in the fused run → verified; none in either → declined (a null point); no line for any eligible
#   model → a binary without the probe: the eligibility prediction stands (dispatch `predicted`).
# rounds: 5 per arm, not the hand procedure's 3: with 3 runs per side a t interval has 2 degrees of freedom and
#   is too wide to decide a few-percent difference.
# parity: mlxcel-bench-decode prints timings but not the generated text; to track greedy parity, point `command`
#   at a greedy generator that prints it and give `parity: {{regex: ...}}` (see README "Calibrating mlxcel").
# expect_null: the fused kernel should decline this checkpoint; measured only with `moecal sweep --measure-null`.
"""


def init_config(
    found: list[DiscoveredModel],
    skipped: list[Skipped],
    bench: str,
    backend: str,
    name: str = "mlxcel",
    probe: str = "",
    parity_regex: str | None = None,
    tokens: int = 100,
    rounds: int = 5,
    dispatch_check: bool = True,
) -> dict[str, object]:
    """The config as a YAML-ready dict (validated by `write_config`)."""
    from harness.analysis.backend_defaults import MLXCEL_DEFAULT_CAPS
    from harness.config.eligibility import model_entry
    from harness.config.schema import DEFAULT_CAP_ENV
    from harness.measure.backends import detect

    resolved = detect().platform if backend == "auto" else backend
    workload: dict[str, object] = {
        "kind": "command",
        "command": [
            *shlex.split(bench),
            *("-m", "{model_path}", "-p", DEFAULT_PROMPT, "-n", str(tokens), "--warmup-tokens", str(WARMUP_TOKENS)),
        ],
        "cap_env": DEFAULT_CAP_ENV,
        "fused_cap": 20000,
        "fallback_cap": 1,
        "timeout_s": 600,
        "env": {},
    }
    if dispatch_check:
        workload["dispatch_check"] = {"enabled": True}
    if probe:
        workload["dispatch_probe"] = {"regex": probe}
    if parity_regex:
        workload["parity"] = {"regex": parity_regex}
    config: dict[str, object] = {"name": name, "backend": backend}
    if resolved in MLXCEL_DEFAULT_CAPS:
        config["current_default"] = MLXCEL_DEFAULT_CAPS[resolved]
    config.update(
        library_pin=f"mlxcel ({shlex.split(bench)[0]})",
        workload=workload,
        models=[model_entry(m) for m in found],
        measure={"warmup_runs": 1, "rounds": rounds, "order": "rotate"},
    )
    return config


def write_config(config: dict[str, object], skipped: list[Skipped], models_dir: Path, out: Path) -> Path:
    from harness.config.schema import parse_config
    from harness.runs.formats import write_text_atomic
    from harness.runs.rundir import refuse_stored

    parse_config(config, str(out))  # what init writes, sweep accepts
    workload = config["workload"]
    header = HEADER.format(
        models=models_dir,
        cap_env=workload["cap_env"],
        fused=workload["fused_cap"],
        fallback=workload["fallback_cap"],
    )
    header += "".join(f"# skipped {s.name}: {s.reason}\n" for s in skipped)
    refuse_stored(out, "choose another --out")
    out.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(out, header + yaml.safe_dump(config, sort_keys=False, allow_unicode=True, width=120))
    return out


def _check_bench_runs(bench: str) -> None:
    """The benchmark starts and answers `--help` within seconds: a config naming a program that is not there (or
    hangs) would otherwise only fail at `moecal sweep`."""
    import os

    from harness.measure.proc import ask_help

    answer = ask_help(shlex.split(bench), os.environ)
    if not answer.answered:
        raise InputError("--bench", bench, f"{answer.unusable()} (install it, put it on PATH, or give its path)")


def init(
    models: Annotated[Path, typer.Option(help="folder of model folders (each with config.json)")] = Path("models"),
    bench: Annotated[str, typer.Option(help="the decode benchmark, with leading arguments")] = "mlxcel-bench-decode",
    backend: Annotated[str, typer.Option(help="metal | cuda | cpu | auto")] = "auto",
    out: Annotated[Path, typer.Option(help="config file to write")] = Path("mlxcel-calibration.yaml"),
    name: Annotated[str, typer.Option(help="config name (part of the run id)")] = "mlxcel",
    probe: Annotated[
        str, typer.Option(help="dispatch probe regex, for a build that prints a line naming the path ('' for none)")
    ] = "",
    dispatch_check: Annotated[
        bool, typer.Option(help="untimed verification pass with mlxcel's parity probe before the timed rounds")
    ] = True,
    parity_regex: Annotated[
        str | None, typer.Option(help="regex whose group 1 is the generated text or token ids", show_default=False)
    ] = None,
    tokens: Annotated[int, typer.Option(min=1, help="tokens to generate per run (-n)")] = 100,
    rounds: Annotated[int, typer.Option(min=1, help="measure.rounds")] = 5,
) -> None:
    """Scan --models for MoE checkpoints and write a command-workload config for `moecal sweep`."""
    from harness.config.backend_specs import BACKEND_NAMES
    from harness.config.discover import scan

    if backend not in (*BACKEND_NAMES, "auto"):
        raise InputError("--backend", backend, f"must be one of {', '.join(BACKEND_NAMES)}, auto")
    if not shlex.split(bench):
        raise InputError("--bench", repr(bench), "empty command")
    found, skipped = scan(models)
    if not found:
        reasons = "; ".join(f"{s.name}: {s.reason}" for s in skipped) or "the folder is empty"
        raise InputError(str(models), "--models", f"no MoE model folder found ({reasons})")
    _check_bench_runs(bench)
    config = init_config(found, skipped, bench, backend, name, probe, parity_regex, tokens, rounds, dispatch_check)
    path = write_config(config, skipped, models, out)
    for model in config["models"]:
        note = f"expect_null: {model['expect_null']}" if "expect_null" in model else "eligible for the fused kernel"
        typer.echo(f"{model['name']}: {model['family']} Dff {model['dff']} {model['quant_mode']} — {note}")
    for s in skipped:
        typer.echo(f"{s.name}: skipped — {s.reason}")
    typer.echo(f"config → {path}\nnext: moecal sweep {path}")


def register(app: typer.Typer) -> None:
    app.command("init")(init)
