"""`moecal verify`: the real CLI on the CPU backend, its JSON, and its exit codes (1 failure, 2 unusable input)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from harness.cli.app import app
from harness.devices.backends.cpu import CpuBackend
from harness.errors import InputError
from tests.support.helpers import REPO, cli, run_cli

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
    bad_shape = cli("verify", "--backend", "cpu", "--shapes", "d2048-x3")
    assert bad_shape.returncode == 2 and "error: --shapes: d2048-x3: cannot read token 'x3'" in bad_shape.stderr
    compile_cpu = cli("verify", "--backend", "cpu", "--compile-only")
    assert compile_cpu.returncode == 2 and "only the cuda backend" in compile_cpu.stderr


def test_verify_says_why_a_backend_is_unavailable() -> None:
    from harness.devices.backends import availability

    if availability("cuda")[0]:
        pytest.skip("a CUDA device is present, so the cuda backend is available here")
    done = cli("verify", "--backend", "cuda", "--shapes", "d512-f256")
    assert done.returncode == 2 and done.stderr.startswith("error: --backend: cuda: not usable here:")


def test_compile_only_compiles_every_variant_for_every_arch_and_fails_on_any_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The NVRTC report path with a stand-in compiler that fails what it is told to fail: the command must ask for
    every kernel variant (18 formats and the 8 A/B variants beyond the default) on all 7 architectures once, list
    each result, attach the log only to failures, and exit 1 on any failure but 0 when all compile."""
    from harness.devices.backends import cuda_compile

    asked: list[tuple[str, str]] = []
    failing = {("q4g64-bfloat16-sgy8-rows2-act_shared", "sm_90")}

    def compile_all(archs, variants):
        pairs = [(variant.label(), arch) for variant in variants for arch in archs]
        asked.extend(pairs)
        return [cuda_compile.CompileResult(v, a, (v, a) not in failing, f"log of {v} {a}") for v, a in pairs]

    monkeypatch.setattr(cuda_compile, "nvrtc_status", lambda: (True, "NVRTC 13.0"))
    monkeypatch.setattr(cuda_compile, "compile_all", compile_all)
    failing_run = CliRunner().invoke(app, ["verify", "--backend", "cuda", "--compile-only", "--json"])
    assert failing_run.exit_code == 1
    assert len(asked) == len(set(asked)) == 26 * 7
    assert {arch for _, arch in asked} == {"sm_80", "sm_86", "sm_89", "sm_90", "sm_100", "sm_120", "sm_121"}
    assert {v for v, _ in asked} >= {"q4g32-float32-sgy8-rows1-act_f32", "q4g64-bfloat16-sgy8-rows4-act_dtype"}
    rows = json.loads(failing_run.stdout)
    assert [(row["variant"], row["arch"]) for row in rows] == asked
    assert [row for row in rows if not row["ok"]] == [
        {"variant": "q4g64-bfloat16-sgy8-rows2-act_shared", "arch": "sm_90", "ok": False, "log": "log of "
         "q4g64-bfloat16-sgy8-rows2-act_shared sm_90"},
    ]  # fmt: skip
    assert all("log" not in row for row in rows if row["ok"])
    failing.clear()
    assert CliRunner().invoke(app, ["verify", "--backend", "cuda", "--compile-only", "--json"]).exit_code == 0


def test_an_unknown_kernel_variant_in_the_environment_is_an_input_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """The cuda backend as if a GPU were here (availability patched): MOECAL_CUDA_ROWS=3 names no variant, which
    must be an InputError (one `error:` line and exit 2 from the CLI's main), not a traceback."""
    import harness.devices.backends as backends
    from harness.cli import verify

    monkeypatch.setattr(backends, "availability", lambda name: (True, "patched for the test"))
    monkeypatch.setenv("MOECAL_CUDA_ROWS", "3")
    with pytest.raises(InputError, match=r"^environment: cuda: invalid CUDA kernel variant .*MOECAL_CUDA_ROWS"):
        verify.open_backend("cuda")


def test_an_unknown_kernel_variant_fails_a_sweep_before_it_starts(monkeypatch: pytest.MonkeyPatch) -> None:
    """The same for the sweep, which builds its backend through get_backend (availability patched as above)."""
    import harness.devices.backends as backends
    from harness.measure import sweep_setup

    monkeypatch.setattr(backends, "availability", lambda name: (True, "patched for the test"))
    monkeypatch.setenv("MOECAL_CUDA_ROWS", "3")
    with pytest.raises(InputError, match=r"backend: backend 'cuda': invalid CUDA kernel variant .*MOECAL_CUDA_ROWS"):
        sweep_setup.prepare(REPO / "configs" / "h200.yaml", backend="cuda")
