"""`moecal verify`: every kernel path a backend offers against the float64 reference, on fresh random inputs.

The check itself is harness.devices.correctness.check_shape; this module picks the backend and shapes, prints the seed
(so a failure can be replayed with --seed) and the table or JSON.

Exit codes: 0 all ok, 1 something failed, 2 the backend cannot run here (the reason is printed).
"""

from __future__ import annotations

import json
import secrets
import sys
from dataclasses import asdict
from typing import TYPE_CHECKING

import typer
from rich.console import Console
from rich.table import Table

from harness.errors import InputError

if TYPE_CHECKING:  # imported when the command runs, not for its --help (tests/test_help.py)
    from harness.devices.backends.base import Backend
    from harness.devices.correctness import PathCheck


def open_backend(name: str) -> Backend:
    """The backend by name (or auto) with output poisoning on; InputError (exit 2) when it cannot run here."""
    from harness.devices.backends import availability, backend_class, resolve_name
    from harness.errors import BackendUnavailable

    try:
        resolved = resolve_name(name)
        usable, reason = availability(resolved)
    except BackendUnavailable as exc:
        raise InputError("--backend", name, str(exc)) from None
    if not usable:
        raise InputError("--backend", resolved, f"not usable here: {reason}")
    try:
        return backend_class(resolved)(poison=True)
    except ValueError as exc:  # a kernel variant from the environment (MOECAL_CUDA_*) that does not exist
        raise InputError("environment", resolved, str(exc)) from None


def _table(title: str, rows: list[PathCheck]) -> Table:
    table = Table(title=title)
    for column in ("shape", "path", "rel_err", "tolerance", "ok"):
        table.add_column(column, justify="right" if column in ("rel_err", "tolerance") else "left")
    for row in rows:
        error = "—" if row.rel_err is None else f"{row.rel_err:.2e}"
        verdict = "[green]ok[/]" if row.ok else f"[red]FAIL[/] {row.error}"
        table.add_row(row.shape, row.path, error, f"{row.tolerance:.0e}", verdict)
    return table


def _compile_only(backend: str, as_json: bool) -> int:
    """Compile every CUDA kernel variant, and the A/B variants, with NVRTC for every supported architecture (no GPU
    needed) and report; returns the exit code."""
    if backend not in ("cuda", "auto"):
        raise InputError("--compile-only", backend, "only the cuda backend compiles kernels ahead of time")
    from harness.devices.backends.cuda_compile import SUPPORTED_ARCHS, compile_all, nvrtc_status
    from harness.devices.backends.cuda_source import ab_variants, all_variants

    usable, reason = nvrtc_status()
    if not usable:
        raise InputError("--compile-only", "nvrtc", reason)
    variants = all_variants()
    results = compile_all(SUPPORTED_ARCHS, variants + [v for v in ab_variants() if v not in variants])
    if as_json:
        rows = [{"variant": r.variant, "arch": r.arch, "ok": r.ok, **({} if r.ok else {"log": r.log})} for r in results]
        print(json.dumps(rows, indent=1))
    else:
        table = Table(title=f"NVRTC compile check ({reason})")
        for column in ("variant", "arch", "ok", "kernels (registers / spill bytes)"):
            table.add_column(column)
        for r in results:
            usage = ", ".join(f"{name} {k.registers}/{k.spill_bytes}" for name, k in r.kernels.items())
            table.add_row(r.variant, r.arch, "[green]ok[/]" if r.ok else "[red]FAIL[/]", usage)
        Console().print(table)
        for r in results:
            if not r.ok:
                print(f"--- {r.variant} {r.arch}\n{r.log}", file=sys.stderr)
    return 0 if all(r.ok for r in results) else 1


def register(app: typer.Typer) -> None:
    @app.command("verify")
    def verify(
        backend: str = typer.Option("auto", "--backend", "-b", help="metal, cuda, cpu or auto."),
        shapes: str = typer.Option(
            "",
            "--shapes",
            help="Comma-separated shapes, e.g. d2048-f768-e8-k2-q4g64-float32 (default: the built-in set).",
        ),
        as_json: bool = typer.Option(False, "--json", help="Print one JSON list of {shape, path, rel_err, ok}."),
        compile_only: bool = typer.Option(False, "--compile-only", help="cuda: compile every kernel with NVRTC."),
        seed: int | None = typer.Option(None, "--seed", help="Seed of the random layers/inputs (default: fresh)."),
    ) -> None:
        """Check every kernel path of a backend against the float64 reference (exit 1 on any failure)."""
        if compile_only:
            raise typer.Exit(_compile_only(backend, as_json))
        from harness.devices.correctness import check_shape
        from harness.devices.kernel_cases import VERIFY_SHAPES, parse_shapes

        cases = parse_shapes(shapes) if shapes else list(VERIFY_SHAPES)
        device = open_backend(backend)
        seed = secrets.randbelow(2**31) if seed is None else seed
        console = Console(stderr=True)
        rows: list[PathCheck] = []
        for shape in cases:
            if not as_json:
                console.print(f"verify {device.name} {shape.label()} (seed {seed})", highlight=False, soft_wrap=True)
            rows.extend(check_shape(device, shape, seed))
        if as_json:
            print(json.dumps([asdict(row) for row in rows], indent=1))
        else:
            Console().print(_table(f"{device.name}: {device.device_name()} — seed {seed}", rows))
        raise typer.Exit(0 if rows and all(row.ok for row in rows) else 1)
