"""`moecal synth --like MODEL_DIR --dff 7168,9216 --out DIR`: synthetic checkpoints of a real family at other Dff.

The plan (per checkpoint: layers, tensors, disk, memory) is printed and checked against free disk and memory before
anything is written; each checkpoint then appears atomically as `DIR/<name>-dff<D>` (planned in
harness.config.synth_checkpoints, written by harness.measure.synth_writer).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from harness.errors import InputError

if TYPE_CHECKING:  # imported when the command runs, not for its --help (tests/test_help.py)
    from harness.config.synth_checkpoints import Plan


MIN_SHARD_GB, MAX_SHARD_GB = 1e-6, 1 << 20  # a shard above a PiB is no limit; inf and NaN are no size


def parse_dffs(text: str) -> list[int]:
    """'7168,9216' → [7168, 9216]; anything but positive integers is an InputError naming --dff."""
    try:
        values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise InputError("--dff", text, "expected comma-separated positive integers") from None
    if not values or min(values) <= 0:
        raise InputError("--dff", text, "expected comma-separated positive integers")
    return list(dict.fromkeys(values))


def plan_lines(plans: list[Plan]) -> list[str]:
    """The `plan`-style table printed before writing."""
    from harness.config.shapes import gib

    lines = []
    for p in plans:
        side = p.sidecar
        quant = sorted({q for q in p.quant.values() if q})
        stored = ", ".join(f"{b}-bit g{g}" for b, g in quant) or "not quantized"
        lines.append(
            f"{p.name}: {p.family} Dff {side['dff']}, {side['layers']} of {side['source_layers']} layers, "
            f"{side['experts']} experts top-{side['top_k']}, {len(p.specs)} tensors ({stored}, {p.dtype}); "
            f"disk {gib(p.disk_bytes)}, memory ≈ {gib(p.memory_bytes)}"
            + (f"; DECLINED by the fused kernel: {side['declined']}" if side["declined"] else "")
        )
    return lines


def synth_command(
    like: Annotated[Path, typer.Option(help="the model folder whose family, shapes and quantization to copy")],
    dff: Annotated[str, typer.Option(help="comma-separated expert intermediate sizes, e.g. 7168,9216")],
    out: Annotated[Path, typer.Option(help="folder to write the checkpoints into (one sub-folder per Dff)")],
    layers: Annotated[int | None, typer.Option(min=1, help="keep only the first N decoder layers")] = None,
    experts: Annotated[int | None, typer.Option(min=1, help="number of routed experts")] = None,
    top_k: Annotated[int | None, typer.Option("--top-k", min=1, help="experts per token")] = None,
    seed: Annotated[int, typer.Option(help="random weights seed")] = 0,
    dtype: Annotated[
        str, typer.Option(help="float dtype of non-quantized tensors: source|float32|float16|bfloat16")
    ] = "source",
    shard_gb: Annotated[float, typer.Option("--shard-gb", help="safetensors shard size limit (GiB)")] = 2.0,
    allow_declined: Annotated[
        bool, typer.Option("--allow-declined", help="write a Dff the fused kernel would decline")
    ] = False,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="print the plan and check space; write nothing")] = False,
) -> None:
    """Write synthetic checkpoints of MODEL_DIR's family at other expert sizes (random weights, MLX format)."""
    from harness.config import synth_checkpoints as synth
    from harness.config.shapes import gib
    from harness.measure import synth_writer

    if not MIN_SHARD_GB <= shard_gb <= MAX_SHARD_GB:  # also NaN; inf would end in an OverflowError
        raise InputError("--shard-gb", str(shard_gb), f"expected a size in GiB from {MIN_SHARD_GB:g} to {MAX_SHARD_GB}")
    shard = int(shard_gb * (1 << 30))
    requests = [synth.Request(like, d, layers, experts, top_k, seed, dtype, allow_declined) for d in parse_dffs(dff)]
    plans = [synth.plan(r, shard) for r in requests]
    for line in plan_lines(plans):
        typer.echo(line)
    disk, memory = synth_writer.free_bytes(out)
    typer.echo(
        f"total disk {gib(sum(p.disk_bytes for p in plans))} ({gib(disk)} free under {out}); "
        f"memory ≈ {gib(max(p.memory_bytes for p in plans))} ({gib(memory)} available)"
    )
    stale, kept = synth_writer.leftover_partials(out, remove=not dry_run)
    for folder in stale:
        done = "would remove" if dry_run else "removed"
        typer.echo(f"{done} {folder.name}: a synth that was stopped before it finished left it")
    for folder in kept:
        typer.echo(f"kept {folder.name}: its synth process is still running")
    synth_writer.check_fits(plans, out)
    if dry_run:
        return
    for request, plan in zip(requests, plans, strict=True):
        started = time.perf_counter()
        path = synth_writer.write(plan, request, out, shard)
        typer.echo(f"{path} ({time.perf_counter() - started:.1f} s)")


def register(app: typer.Typer) -> None:
    app.command("synth")(synth_command)
