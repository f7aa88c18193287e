"""Run the kernel bodies of kernels/metal/moe_fused.metal on the CPU as C++ (tests only).

There is no Metal GPU on Linux, yet the kernels must be right when a Mac runs them. This module assembles each
kernel the way `mx.fast.metal_kernel` does (a port of MLX's signature generator: header, a signature generated
from the arrays' dtypes and the attributes the body mentions, the body, the explicit instantiation) and
compiles it with g++ against a small shim of the Metal dialect: address-space qualifiers vanish, `bfloat16_t`
and `float16_t` become host types, and `metal::simd_sum` is a reduction across 32 fibers that run one
simdgroup's lanes in lockstep. `EmulatedMetalBackend` is the real `MetalBackend` with only its kernel launch
replaced, so the Python side of the fused path (argument order, grid, template, the f32 sum over slots and the
final rounding) runs too. What it cannot catch: constructs g++ accepts but the Metal compiler rejects (address
spaces above all), and anything about speed.
"""

from __future__ import annotations

import ctypes
import hashlib
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import mlx.core as mx
import numpy as np

from harness.devices.backends.metal import (
    METAL_SOURCE,
    MetalBackend,
    MetalKernelSource,
    kernel_template,
    split_metal_source,
)

# MLX's get_type_string for the dtypes these kernels see.
TYPE_STRINGS = {mx.float32: "float", mx.float16: "float16_t", mx.bfloat16: "bfloat16_t", mx.uint32: "uint32_t"}
# MLX binds inputs with fewer elements than this in the `constant` address space, the rest in `device`.
MAX_CONSTANT_ARRAY_SIZE = 8
# Thread attributes MLX adds to a signature when the body mentions them: the two the emulator supplies (with
# the argument its driver passes), and others it refuses rather than silently passing garbage.
ATTRIBUTES = {
    "thread_position_in_grid": ("uint3", "uint3{lane, y, z}"),
    "thread_index_in_simdgroup": ("uint", "lane"),
}
UNSUPPORTED_ATTRIBUTES = (
    "threadgroup_position_in_grid",
    "thread_position_in_threadgroup",
    "thread_index_in_threadgroup",
    "simdgroup_index_in_threadgroup",
    "threads_per_threadgroup",
)
# Extra f32 elements after each output, filled with this value: a write past the end changes them.
CANARY_LEN, CANARY = 64, 12345.0

SHIM = r"""
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <ucontext.h>

using uint = unsigned int;
struct uint3 { uint x, y, z; };
struct uint4 { uint x, y, z, w; };
struct float4 { float x, y, z, w; };
using float16_t = _Float16;
struct bfloat16_t {  // MLX bfloat16 storage; converts to float exactly as the GPU type does
  uint16_t bits;
  operator float() const { uint32_t u = uint32_t(bits) << 16; float f; std::memcpy(&f, &u, 4); return f; }
};
namespace metal {
inline float fma(float a, float b, float c) { return std::fma(a, b, c); }
namespace precise { inline float exp(float x) { return std::exp(x); } }
template <typename To, typename From> To as_type(From v) {
  static_assert(sizeof(To) == sizeof(From), "as_type keeps the size");
  To t; std::memcpy(&t, &v, sizeof t); return t;
}
float simd_sum(float value);
}

// One simdgroup = 32 fibers (ucontext) run by a scheduler: each lane runs until it reaches simd_sum (it parks
// there) or returns. When every lane is parked the scheduler sums their values and resumes them all; a
// simd_sum reached by only some lanes (divergent control flow, undefined on a GPU) aborts the emulation.
struct Simdgroup {
  ucontext_t scheduler;
  ucontext_t lanes[32];
  bool done[32];
  float values[32];
  float total;
  int running;
};
static Simdgroup group;
float metal::simd_sum(float value) {
  const int lane = group.running;
  group.values[lane] = value;
  swapcontext(&group.lanes[lane], &group.scheduler);
  return group.total;
}
static void run_simdgroup(void (*lane_entry)()) {
  static char stacks[32][1 << 16];
  for (int lane = 0; lane < 32; ++lane) {
    getcontext(&group.lanes[lane]);
    group.lanes[lane].uc_stack.ss_sp = stacks[lane];
    group.lanes[lane].uc_stack.ss_size = sizeof stacks[lane];
    group.lanes[lane].uc_link = &group.scheduler;
    makecontext(&group.lanes[lane], lane_entry, 0);
    group.done[lane] = false;
  }
  for (;;) {
    int finished = 0;
    for (int lane = 0; lane < 32; ++lane) {
      if (!group.done[lane]) {
        group.running = lane;
        swapcontext(&group.scheduler, &group.lanes[lane]);
      }
      finished += group.done[lane];
    }
    if (finished == 32) return;
    if (finished != 0) std::abort();  // some lanes returned while others wait in simd_sum
    group.total = 0.0f;
    for (int lane = 0; lane < 32; ++lane) group.total += group.values[lane];
  }
}
#define device
#define constant
#define thread
"""


@dataclass(frozen=True)
class Param:
    """One generated parameter: C type, name, its `[[...]]` attribute, and what the driver passes for it."""

    ctype: str
    name: str
    attribute: str
    argument: str


@dataclass(frozen=True)
class Instance:
    """One kernel instantiation: the template MLX gets, and per input its dtype and whether MLX binds it in
    the `constant` address space."""

    kernel: str
    template: tuple[tuple[str, Any], ...]
    inputs: tuple[tuple[str, mx.Dtype, bool], ...]

    def _values(self) -> list[str]:
        return [TYPE_STRINGS[v] if isinstance(v, mx.Dtype) else str(v) for _, v in self.template]

    def function_name(self) -> str:
        """MLX's name: `custom_kernel_<name>_` + the `<...>` template list with `<`, `>` and `, ` as `_`."""
        return f"custom_kernel_{self.kernel}__{'_'.join(self._values())}"

    def template_args(self) -> str:
        return ", ".join(self._values())

    def params(self, spec: MetalKernelSource) -> list[Param]:
        """The signature MLX writes, in order: inputs (each followed by its shape buffer when the body names
        `<input>_shape`), outputs (all f32 here), then the thread attributes the body mentions."""
        buffers: list[tuple[str, str]] = []
        for name, dtype, constant in self.inputs:
            buffers.append((f"const {'constant' if constant else 'device'} {TYPE_STRINGS[dtype]}*", name))
            if f"{name}_strides" in spec.body or f"{name}_ndim" in spec.body:
                raise NotImplementedError(f"{spec.name}: the emulator binds only *_shape buffers")
            if f"{name}_shape" in spec.body:
                buffers.append(("const constant int*", f"{name}_shape"))
        buffers += [("device float*", name) for name in spec.output_names]
        unsupported = [a for a in UNSUPPORTED_ATTRIBUTES if a in spec.body]
        if unsupported:
            raise NotImplementedError(f"{spec.name}: the emulator cannot supply {unsupported}")
        params = [Param(c, n, f"buffer({i})", f"({c})buffers[{i}]") for i, (c, n) in enumerate(buffers)]
        return params + [Param(c, a, a, arg) for a, (c, arg) in ATTRIBUTES.items() if a in spec.body]


def instance_for(spec: MetalKernelSource, template: list[tuple[str, Any]], arrays: dict[str, mx.array]) -> Instance:
    inputs = tuple((n, arrays[n].dtype, arrays[n].size < MAX_CONSTANT_ARRAY_SIZE) for n in spec.input_names)
    return Instance(spec.name, tuple(template), inputs)


def kernel_source(spec: MetalKernelSource, instance: Instance) -> str:
    """The kernel function and its explicit instantiation as MLX generates them (MLX prepends the header)."""
    name, args = instance.function_name(), instance.template_args()
    kinds = ", ".join(f"{'typename' if isinstance(v, mx.Dtype) else 'int'} {n}" for n, v in instance.template)
    signature = ",\n".join(f"  {p.ctype} {p.name} [[{p.attribute}]]" for p in instance.params(spec))
    return (
        f"template <{kinds}>\n[[kernel]] void {name}(\n{signature}) {{\n{spec.body}\n}}\n"
        f'template [[host_name("{name}")]] [[kernel]] decltype({name}<{args}>) {name}<{args}>;\n'
    )


def _driver(spec: MetalKernelSource, instance: Instance) -> str:
    """Per-lane entry and the grid walk: one emulated simdgroup per (y, z) of the grid, in order."""
    call_args = ", ".join(p.argument for p in instance.params(spec))
    return f"""
static void** launch_buffers;
static int launch_y, launch_z;
static void lane_entry() {{
  void** buffers = launch_buffers;
  const uint lane = uint(group.running), y = uint(launch_y), z = uint(launch_z);
  {instance.function_name()}<{instance.template_args()}>({call_args});
  group.done[lane] = true;
}}
static void run(void** buffers, int grid_y, int grid_z) {{
  launch_buffers = buffers;
  for (launch_z = 0; launch_z < grid_z; ++launch_z)
    for (launch_y = 0; launch_y < grid_y; ++launch_y) run_simdgroup(lane_entry);
}}
"""


def translation_unit(source: str, instances: tuple[Instance, ...]) -> str:
    """One C++ file: the shim, the .metal header once, then instance i (kernel + driver) in namespace
    `instance_i` with entry point `run_i`. Namespaces because MLX names a kernel by its template only: one
    template with differently typed or placed inputs (e.g. top_k 2 and 8) is two instances of one name."""
    header, kernels = split_metal_source(source)
    parts = [SHIM, header]
    for i, instance in enumerate(instances):
        spec = kernels[instance.kernel]
        parts += [
            f"namespace instance_{i} {{",
            kernel_source(spec, instance),
            _driver(spec, instance),
            "}",
            f'extern "C" void run_{i}(void** buffers, int y, int z) {{ instance_{i}::run(buffers, y, z); }}',
        ]
    return "\n".join(parts)


def compiler() -> str | None:
    return shutil.which("g++")


@cache
def build(metal_source: str, instances: tuple[Instance, ...]) -> ctypes.CDLL:
    """Compile the instances into one shared library (once per process per source and set of instances)."""
    source = translation_unit(metal_source, instances)
    workdir = Path(tempfile.mkdtemp(prefix="moecal-metal-emu-"))
    (workdir / "metal_stdlib").write_text("// the shim stands in for <metal_stdlib>\n")
    cpp = workdir / f"{hashlib.sha256(source.encode()).hexdigest()[:16]}.cpp"
    cpp.write_text(source)
    lib = cpp.with_suffix(".so")
    flags = ["-std=c++17", "-O1", "-shared", "-fPIC", "-Wno-attributes", f"-I{workdir}"]
    result = subprocess.run([compiler() or "g++", *flags, str(cpp), "-o", str(lib)], capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"g++ rejected the emulated Metal source {cpp}:\n{result.stderr[-4000:]}")
    return ctypes.CDLL(str(lib))


def host_buffer(array: mx.array) -> np.ndarray:
    """The bytes MLX would hand the kernel: contiguous storage of the array (bfloat16 as its uint16 bits)."""
    if array.dtype == mx.bfloat16:
        array = array.view(mx.uint16)
    return np.ascontiguousarray(np.array(array))


class EmulatedMetalBackend(MetalBackend):
    """MetalBackend whose launches run the emulated kernels. Outputs are always poisoned (NaN) and followed by
    a canary; the y grid is rounded up to whole threadgroups (as a CUDA launch or a GPU without non-uniform
    threadgroups would do), so the kernels' early exits are exercised too.

    Two passes, because compiling is the slow part: with `library` unset, `fused` only records the instances
    it would launch (returning zeros); `compile()` builds them all in one translation unit. `source` replaces
    the .metal text (tests that prove a broken kernel is caught).
    """

    def __init__(self, sgy: int = 8, rows: int = 1, source: str | None = None):
        super().__init__(poison=True, sgy=sgy, rows=rows)
        self.source = METAL_SOURCE.read_text() if source is None else source
        self.kernels = split_metal_source(self.source)[1]
        self.planned: list[Instance] = []
        self.instances: tuple[Instance, ...] = ()
        self.library: ctypes.CDLL | None = None

    def compile(self) -> None:
        self.instances = tuple(dict.fromkeys(self.planned))
        self.library = build(self.source, self.instances)

    def _launch(self, name: str, arrays: dict[str, Any], layer: Any, rows: int, top_k: int) -> Any:
        spec = self.kernels[name]
        template = kernel_template(layer.dtype, layer.bits, layer.group_size, self.rows)
        instance = instance_for(spec, template, arrays)
        if self.library is None:
            self.planned.append(instance)
            return mx.zeros((top_k, rows), dtype=mx.float32)
        out = np.full(top_k * rows + CANARY_LEN, np.nan, dtype=np.float32)
        out[top_k * rows :] = CANARY
        keep = []
        for input_name in spec.input_names:
            keep.append(host_buffer(arrays[input_name]))
            if f"{input_name}_shape" in spec.body:
                keep.append(np.array(arrays[input_name].shape, dtype=np.int32))
        keep.append(out)
        pointers = (ctypes.c_void_p * len(keep))(*[a.ctypes.data for a in keep])
        grid_y = -(-(rows // self.rows) // self.sgy) * self.sgy
        getattr(self.library, f"run_{self.instances.index(instance)}")(pointers, grid_y, top_k)
        if not np.all(out[top_k * rows :] == CANARY):
            raise AssertionError(f"{name} wrote past the end of its output")
        return mx.array(out[: top_k * rows].reshape(top_k, rows))
