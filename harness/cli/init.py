"""`moecal init --models DIR`: a ready command-workload config for calibrating mlxcel on the models found in DIR.

Every model folder becomes a model entry with its real shape (harness.config.discover) and, where mlxcel's fused kernel
should decline the checkpoint, `expect_null: <reason>`; where its family ignores the cap, `forced_by: switch`
(harness.config.eligibility). What moecal knows of mlxcel comes from `--mlxcel-src DIR` when given (derived from the
tree, harness.config.mlxcel_tree), else from the shipped table; either way the listing says where each family's
wiring came from. The protocol comes from the binary's own `--help` (harness.measure.bench_capabilities): a fixed
token budget with `--ignore-eos` where it has that flag, else the July protocol. Folders without MoE layers are listed
as skipped, with the reason, in the file's header. The written config is validated before it is written, so what
`init` writes is what `moecal sweep` accepts.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, NotRequired, TypedDict

import typer
import yaml

from harness.errors import InputError

if TYPE_CHECKING:  # imported when the command runs, not for its --help (tests/test_help.py)
    from harness.config.discover import DiscoveredModel, Skipped
    from harness.config.eligibility import Knowledge, ModelEntryYAML
    from harness.measure.bench_capabilities import Capabilities


class WorkloadYAML(TypedDict):
    """The config's `workload:` block as init writes it: the benchmark run once per model and arm, each arm forced
    through the cap variable; the optional blocks only where init has them."""

    kind: str
    command: list[str]
    cap_env: str
    fused_cap: int
    fallback_cap: int
    timeout_s: int
    env: dict[str, str]
    prompt_tokens: NotRequired[list[int]]
    dispatch_check: NotRequired[dict[str, bool]]
    dispatch_probe: NotRequired[dict[str, str]]
    parity: NotRequired[dict[str, str]]


class MeasureYAML(TypedDict):
    warmup_runs: int
    rounds: int
    order: str


class CapYAML(TypedDict, total=False):
    """mlxcel's compiled-in cap for the backend, where it has one (after `backend` in the file)."""

    current_default: int


class ConfigYAML(CapYAML):
    """The config init writes, in its keys' order in the file (harness.config.schema.parse_config validates it)."""

    name: str
    backend: str
    library_pin: str
    workload: WorkloadYAML
    models: list[ModelEntryYAML]
    measure: MeasureYAML


DEFAULT_PROMPT = "Hello, how are you today?"
WARMUP_TOKENS = 20  # mlxcel-bench-decode's own default and the maintainers' protocol (design doc addenda)
HEADER = """\
# Written by `moecal init` from the model folders in {models}. Calibrates mlxcel's fused-MoE Dff cap with its
# own decode benchmark, by the maintainers' protocol ({protocol}, one process per run): each arm is forced through
# {cap_env} (fused {fused}, fallback {fallback}); a model with `forced_by: switch` (its family ignores the cap) also
# sets MLXCEL_FUSED_MOE=0 in the fallback arm and stays out of the cap's crossover.
# families and rules: {origin}
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


# bench_decode.sh's standard shape today (lablup/mlxcel scripts/bench_decode.sh and src/bin/bench_decode.rs:
# `--prompt-tokens N` synthesizes a deterministic N-token prompt; the maintainers' decode runs add a 128-token budget
# with `--ignore-eos`, PR #1888's report): a 512-token context, so attention's share of a step is what mlxcel publishes
TODAY_PROMPT_TOKENS = 512
TODAY_TOKENS = 128
JULY_TOKENS = 100  # mlxcel-bench-decode's `-n` default, the July protocol's budget


def protocol_args(caps: Capabilities | None, tokens: int | None, prompt_tokens: str | int | None = None) -> list[str]:
    """The benchmark's arguments after the model. Today's shape where the binary offers its flags (a synthesized
    `--prompt-tokens` context, a fixed `-n` budget with `--ignore-eos`, a 20-token warm-up); a fixed budget on the
    short prompt where it has only `--ignore-eos`; else the July protocol (greedy to EOS on the short prompt).
    `prompt_tokens` overrides the context (a `{prompt_tokens}` placeholder for a context axis)."""
    today = caps is not None and caps.todays_shape
    args = ["-p", DEFAULT_PROMPT]
    if today:
        context = TODAY_PROMPT_TOKENS if prompt_tokens is None else prompt_tokens
        args += ["--prompt-tokens", str(context)]
    budget = tokens if tokens is not None else TODAY_TOKENS if today else JULY_TOKENS
    args += ["-n", str(budget), "--warmup-tokens", str(WARMUP_TOKENS)]
    return [*args, "--ignore-eos"] if caps is not None and caps.fixed_budget else args


def _depth(context: list[int] | None) -> str | int | None:
    """What `--prompt-tokens` gets: the one depth given, the axis's placeholder for several, None for the default."""
    if not context:
        return None
    return context[0] if len(context) == 1 else "{prompt_tokens}"


def protocol_words(command: list[str]) -> str:
    """The header's description of the protocol a command line runs (and where it came from)."""
    tokens = command[command.index("-n") + 1]
    if "--prompt-tokens" in command:
        context = command[command.index("--prompt-tokens") + 1].replace("{prompt_tokens}", "N (the context axis)")
        return (
            f"today's bench_decode.sh shape, from the binary's --help: a synthesized {context}-token prompt, a fixed "
            f"{tokens}-token budget (--ignore-eos) after a {WARMUP_TOKENS}-token warm-up"
        )
    if "--ignore-eos" in command:
        return (
            f"short prompt, a fixed {tokens}-token budget (--ignore-eos) after a {WARMUP_TOKENS}-token warm-up; the "
            "binary's --help offers no --prompt-tokens, so not today's 512-token shape"
        )
    return (
        f"the July protocol: short prompt, up to {tokens} decode tokens (stops at EOS) after a {WARMUP_TOKENS}-token "
        "warm-up; the binary's --help offers neither --prompt-tokens nor --ignore-eos"
    )


def init_config(
    found: list[DiscoveredModel],
    skipped: list[Skipped],
    bench: str,
    backend: str,
    name: str = "mlxcel",
    probe: str = "",
    parity_regex: str | None = None,
    tokens: int | None = None,
    rounds: int = 5,
    dispatch_check: bool = True,
    knowledge: Knowledge | None = None,
    caps: Capabilities | None = None,
    context: list[int] | None = None,
) -> ConfigYAML:
    """The config as a YAML-ready dict (validated by `write_config`). `caps`: what the binary's --help said (None:
    not asked, the July protocol). `context`: the depths of a context axis (today's shape only)."""
    from harness.analysis.decision.decision_facts import MLXCEL_DEFAULT_CAPS
    from harness.config.eligibility import SHIPPED, model_entry
    from harness.config.schema import DEFAULT_CAP_ENV
    from harness.devices.backends import detect

    resolved = detect().platform if backend == "auto" else backend
    workload: WorkloadYAML = {
        "kind": "command",
        "command": [*shlex.split(bench), "-m", "{model_path}", *protocol_args(caps, tokens, _depth(context))],
        "cap_env": DEFAULT_CAP_ENV,
        "fused_cap": 20000,
        "fallback_cap": 1,
        "timeout_s": 600,
        "env": {},
    }
    if context and len(context) > 1:
        workload["prompt_tokens"] = list(context)
    if dispatch_check:
        workload["dispatch_check"] = {"enabled": True}
    if probe:
        workload["dispatch_probe"] = {"regex": probe}
    if parity_regex:
        workload["parity"] = {"regex": parity_regex}
    cap: CapYAML = {"current_default": MLXCEL_DEFAULT_CAPS[resolved]} if resolved in MLXCEL_DEFAULT_CAPS else {}
    return {
        "name": name,
        "backend": backend,
        **cap,
        "library_pin": f"mlxcel ({shlex.split(bench)[0]})",
        "workload": workload,
        "models": [model_entry(m, knowledge or SHIPPED) for m in found],
        "measure": {"warmup_runs": 1, "rounds": rounds, "order": "rotate"},
    }


def write_config(
    config: ConfigYAML,
    skipped: list[Skipped],
    models_dir: Path,
    out: Path,
    origin: str = "",
    notes: Sequence[str] = (),
) -> Path:
    from harness.config.schema import parse_config
    from harness.runs.formats import write_text_atomic
    from harness.runs.rundir import refuse_stored

    parse_config(config, str(out))  # what init writes, sweep accepts
    workload = config["workload"]
    header = HEADER.format(
        models=models_dir,
        protocol=protocol_words(workload["command"]),
        cap_env=workload["cap_env"],
        fused=workload["fused_cap"],
        fallback=workload["fallback_cap"],
        origin=origin or "moecal's shipped table",
    )
    header += "".join(f"#   {note}\n" for note in notes)
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
    backend: Annotated[str, typer.Option(help="metal | cuda | rocm | cpu | auto")] = "auto",
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
    tokens: Annotated[
        int | None,
        typer.Option(min=1, help="tokens to generate per run (-n); default 128 in today's shape, else 100"),
    ] = None,
    rounds: Annotated[int, typer.Option(min=1, help="measure.rounds")] = 5,
    mlxcel_src: Annotated[
        Path | None,
        typer.Option(
            help="an mlxcel source tree: derive the wired families and decline rules from it", show_default=False
        ),
    ] = None,
    context: Annotated[
        list[int] | None,
        typer.Option(
            min=1,
            help="context depth (--prompt-tokens) instead of 512; repeat for a context axis, a crossover per depth",
            show_default=False,
        ),
    ] = None,
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
    knowledge, notes = _knowledge(mlxcel_src)
    caps = _capabilities(bench)
    if context and not caps.todays_shape:
        raise InputError("--context", ",".join(map(str, context)), f"{bench} offers no --prompt-tokens (its --help)")
    config = init_config(
        found,
        skipped,
        bench,
        backend,
        name,
        probe,
        parity_regex,
        tokens,
        rounds,
        dispatch_check,
        knowledge,
        caps,
        context,
    )
    if mlxcel_src is not None:  # the tree's version, commit and MLX pin: what the run was measured under
        from harness.config.mlxcel_tree import tree_pin

        config["library_pin"] = tree_pin(mlxcel_src)
    path = write_config(config, skipped, models, out, knowledge.origin, notes)
    typer.echo(f"families and rules from {knowledge.origin}")
    for note in notes:
        typer.echo(f"  {note}")
    typer.echo(f"protocol: {caps.as_meta()['bench_protocol'] if caps.usable else caps.problem}")
    for model in config["models"]:
        typer.echo(listing_line(model, knowledge))
    for s in skipped:
        typer.echo(f"{s.name}: skipped — {s.reason}")
    typer.echo(f"config → {path}\nnext: moecal sweep {path}")


def _knowledge(mlxcel_src: Path | None) -> tuple[Knowledge, list[str]]:
    from harness.config.eligibility import SHIPPED
    from harness.config.mlxcel_tree import derive

    return derive(mlxcel_src) if mlxcel_src is not None else (SHIPPED, [])


def _capabilities(bench: str) -> Capabilities:
    from harness.measure.bench_capabilities import capabilities

    argv = shlex.split(bench)
    return capabilities(argv[0], tuple(argv[1:]))


def listing_line(model: ModelEntryYAML, knowledge: Knowledge) -> str:
    """One model of `init`'s listing: shape, the prediction, how its arms are forced, and where that came from."""
    from harness.config.mlxcel_families import lookup

    family = str(model["family"]).removesuffix(" (synthetic)")
    wiring = lookup(family, knowledge.families)
    if "expect_null" in model:
        note = f"expect_null: {model['expect_null']}"
    elif wiring is None:
        note = str(model.get("eligibility"))
    else:
        forced = (
            "the cap" if model.get("forced_by", "cap") == "cap" else "MLXCEL_FUSED_MOE (the family ignores the cap)"
        )
        note = f"eligible, arms forced by {forced}; {wiring.source}"
    return f"{model['name']}: {model['family']} Dff {model['dff']} {model['quant_mode']} — {note}"


def register(app: typer.Typer) -> None:
    app.command("init")(init)
