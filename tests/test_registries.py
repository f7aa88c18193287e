"""The backend and workload-kind registries are complete: every entry's module is what the entry says, and every
question the harness asks of a backend or kind is answered by its entry (no name hard-coded elsewhere)."""

from __future__ import annotations

import importlib

import pytest

from harness.config.backend_specs import BACKEND_NAMES, BACKENDS, backend_spec
from harness.config.install_hint import extras
from harness.config.schema import KINDS, WORKLOAD_KINDS, load_yaml, parse_config, resolved_dtype
from harness.devices.backends import Detection, backend_class
from harness.errors import BackendUnavailable, InputError
from harness.measure.workloads.arrays import array_ops
from harness.runs.provenance import library_pin
from tests.support.helpers import REPO


@pytest.mark.parametrize("spec", BACKENDS, ids=lambda s: s.name)
def test_each_backend_module_defines_the_registered_backend(spec):
    assert backend_class(spec.name).name == spec.name  # importing it needs no device library


def test_unknown_backend_names_the_registered_ones():
    with pytest.raises(BackendUnavailable, match="choose one of metal, cuda, rocm, cpu or auto"):
        backend_spec("tpu")


def test_registry_answers_what_callers_used_to_hard_code():
    assert [resolved_dtype("auto", name) for name in BACKEND_NAMES] == ["bfloat16", "bfloat16", "bfloat16", "float32"]
    assert [type(array_ops(name, "float32")).__name__ for name in BACKEND_NAMES] == [
        "MlxOps",
        "CupyOps",
        "ArrayOps",
        "ArrayOps",
    ]
    assert {name: backend_spec(name).mlxcel is not None for name in BACKEND_NAMES} == {
        "metal": True,
        "cuda": True,
        "rocm": True,  # command workloads only: moecal has no ROCm kernels
        "cpu": False,
    }
    packages = {"numba": "0.68", "numpy": "2.3", "mlx": "0.32.1", "cupy-cuda13x": "13.6"}
    pins = [library_pin(name, packages, {"cuda": "13.0"}) for name in BACKEND_NAMES]
    assert pins == ["MLX 0.32.1", "CuPy 13.6 / CUDA 13.0", "ROCm", "numba 0.68"]
    assert extras() == {
        "mlx": "cpu",
        "cupy": "cuda",
        "cupy_backends": "cuda",
        "numba": "cpu",
        "ray": "fleet",
        "nvidia": "nvrtc",
    }


def test_platform_of_an_external_command_follows_the_registry_probes():
    usable = {name: (False, "") for name in BACKEND_NAMES}
    assert Detection(usable, {"gpu": "NVIDIA H200"}, apple_silicon=False).platform == "cuda"
    assert Detection(usable, {}, apple_silicon=True).platform == "metal"
    assert Detection(usable, {}, apple_silicon=False).platform == "cpu"


def test_every_config_kind_has_a_registered_workload():
    assert WORKLOAD_KINDS == ("command", "layer", "decode")  # what a config's `kind:` accepts, in registry order
    for kind in KINDS:
        workload = importlib.import_module(kind.module).WORKLOAD
        assert workload.kind == kind.name and callable(workload.build)


def test_config_backend_accepts_exactly_the_registered_names():
    data = load_yaml(REPO / "configs" / "mlxcel-command.yaml")
    for name in (*BACKEND_NAMES, "auto"):
        assert parse_config({**data, "backend": name}, "c.yaml").backend == name
    with pytest.raises(InputError, match="backend.*'metal', 'cuda', 'rocm', 'cpu' or 'auto'"):
        parse_config({**data, "backend": "tpu"}, "c.yaml")
