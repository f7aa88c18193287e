"""`moecal verify`: the real CLI on the CPU backend, its JSON, and its exit codes (1 failure, 2 unusable input)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from harness.backends.cpu import CpuBackend
from harness.cli import app
from harness.errors import InputError
from tests.helpers import REPO, run_cli

SHAPES = "d1024-f512-e4-k2-q8g32,d2080-f512-k1-q4g32-bf16"


def test_verify_cpu_json_reports_every_path_within_tolerance() -> None:
    done = run_cli("verify", "--backend", "cpu", "--json", "--shapes", SHAPES, "--seed", "5")
    assert done.returncode == 0, done.stderr
    rows = json.loads(done.stdout)
    shapes = {row["shape"] for row in rows}
    assert shapes == {"d1024-f512-e4-k2-q8g32-float32", "d2080-f512-e8-k1-q4g32-bfloat16"}
    for shape in shapes:
        assert {"fused", "fallback"} <= {row["path"] for row in rows if row["shape"] == shape}
    for row in rows:
        assert row["ok"] is True and 0 < row["rel_err"] <= row["tolerance"] and row["seed"] == 5


def test_verify_fails_with_exit_1_when_a_path_is_wrong(monkeypatch: pytest.MonkeyPatch) -> None:
    """A path that returns plausible but wrong numbers must fail its row and the run, not pass quietly."""
    real_paths = CpuBackend.paths

    def paths_with_a_bad_one(self: CpuBackend) -> dict:
        def off_by_a_bit(x, indices, scores, layer) -> np.ndarray:
            return self.fused(x, indices, scores, layer) * np.float32(1.001)

        return {**real_paths(self), "scaled": off_by_a_bit}

    monkeypatch.setattr(CpuBackend, "paths", paths_with_a_bad_one)
    result = CliRunner().invoke(app, ["verify", "--backend", "cpu", "--json", "--shapes", "d512-f256-e4-k2"])
    assert result.exit_code == 1
    verdicts = {row["path"]: row["ok"] for row in json.loads(result.stdout)}
    assert verdicts["scaled"] is False and verdicts["fused"] is True and verdicts["fallback"] is True


def test_verify_rejects_bad_shapes_and_unusable_backends_with_exit_2() -> None:
    bad_shape = run_cli("verify", "--backend", "cpu", "--shapes", "d2048-x3")
    assert bad_shape.returncode == 2 and "error: --shapes: d2048-x3: cannot read token 'x3'" in bad_shape.stderr
    compile_cpu = run_cli("verify", "--backend", "cpu", "--compile-only")
    assert compile_cpu.returncode == 2 and "only the cuda backend" in compile_cpu.stderr


def test_verify_says_why_a_backend_is_unavailable() -> None:
    from harness.backends import availability

    if availability("cuda")[0]:
        pytest.skip("a CUDA device is present, so the cuda backend is available here")
    done = run_cli("verify", "--backend", "cuda", "--shapes", "d512-f256")
    assert done.returncode == 2 and done.stderr.startswith("error: --backend: cuda: not usable here:")


def test_compile_only_reports_each_variant_and_fails_on_any_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """The NVRTC report path, with the compiler replaced so the test is fast: one bad variant means exit 1."""
    from harness.backends import cuda_compile

    results = [
        cuda_compile.CompileResult("q4g64-float32", "sm_90", True, "ptxas info"),
        cuda_compile.CompileResult("q8g32-bfloat16", "sm_90", False, "error: expected a ';'"),
    ]
    monkeypatch.setattr(cuda_compile, "nvrtc_status", lambda: (True, "NVRTC 13.0"))
    monkeypatch.setattr(cuda_compile, "compile_all", lambda archs, variants: results)
    result = CliRunner().invoke(app, ["verify", "--backend", "cuda", "--compile-only", "--json"])
    assert result.exit_code == 1
    assert json.loads(result.stdout) == [
        {"variant": "q4g64-float32", "arch": "sm_90", "ok": True},
        {"variant": "q8g32-bfloat16", "arch": "sm_90", "ok": False, "log": "error: expected a ';'"},
    ]


def test_an_unknown_kernel_variant_in_the_environment_is_an_input_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """The cuda backend as if a GPU were here (availability patched): MOECAL_CUDA_ROWS=3 names no variant, which
    must be an InputError (one `error:` line and exit 2 from the CLI's main), not a traceback."""
    import harness.backends as backends
    from harness.commands import verify

    monkeypatch.setattr(backends, "availability", lambda name: (True, "patched for the test"))
    monkeypatch.setenv("MOECAL_CUDA_ROWS", "3")
    with pytest.raises(InputError, match=r"^environment: cuda: invalid CUDA kernel variant .*MOECAL_CUDA_ROWS"):
        verify.open_backend("cuda")


def test_an_unknown_kernel_variant_fails_a_sweep_before_it_starts(monkeypatch: pytest.MonkeyPatch) -> None:
    """The same for the sweep, which builds its backend through get_backend (availability patched as above)."""
    import harness.backends as backends
    from harness import sweep as sweeps

    monkeypatch.setattr(backends, "availability", lambda name: (True, "patched for the test"))
    monkeypatch.setenv("MOECAL_CUDA_ROWS", "3")
    with pytest.raises(InputError, match=r"backend: backend 'cuda': invalid CUDA kernel variant .*MOECAL_CUDA_ROWS"):
        sweeps.prepare(REPO / "configs" / "h200.yaml", backend="cuda")
