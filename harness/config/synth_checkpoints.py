"""Synthetic checkpoints, planned: a real model family at any expert size (Dff), with random weights, in MLX format.

Real MoE models come at a handful of Dff values, so an engine's crossover between two of them is a straight line
drawn across a gap. A checkpoint of the same family with another Dff — same config.json otherwise, random weights,
experts quantized like the source — puts the engine's own kernels at any Dff. Only the MoE difference between the
arms decides the sign of the ratio, so `layers` may cut the decoder short: fewer layers dilute the ratio less and
make the checkpoint small, without moving the crossover.

What is written, per Dff: `<name>-dff<D>/` with config.json (the family's expert-size key, and the overrides, changed;
`quantization` restated for what was written), safetensors shards (one `model.safetensors` below the shard size,
else `model-0000i-of-0000n.safetensors` and an index), the source's tokenizer and other non-weight files, and
`moecal-synth.json` (SIDECAR: what it was made from, so `init` labels it synthetic and a cache can trust it).
This module decides (the `Plan`: config, tensors, sizes, the sidecar and its content hash) and writes nothing, so a
plan can be shown and checked without side effects (`moecal plan`, `moecal synth --dry-run`); MLX writes it in
harness.measure.synth_writer.

Non-quantized tensors (norms, biases, and the layers the source keeps dense) take the source's `torch_dtype` unless
`dtype` says otherwise; quantization scales and biases take the same dtype, as `mlx.core.quantize` returns them.
On MLX's CPU build use float32: its low-precision quantized matmuls are inaccurate, which matters for tests that
generate tokens, not for an engine's timing.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from dataclasses import dataclass
from pathlib import Path

from harness import __version__
from harness.config.discover import FAMILIES, SYNTH_SIDECAR, DiscoveredModel, read_model
from harness.config.eligibility import predict_null
from harness.config.synth_layouts import LAYOUTS, TensorSpec, count
from harness.errors import InputError

SIDECAR = SYNTH_SIDECAR
FORMAT = 1  # bump when the written bytes for the same request change (invalidates cached checkpoints)
DEFAULT_SHARD_BYTES = 2 << 30
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf", ".npz", ".index.json")
DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2}
# per-layer lists in config.json that must shrink with num_hidden_layers (lfm2: layer_types; qwen: mlp_only_layers)
PER_LAYER_LISTS = ("layer_types",)
LAYER_INDEX_LISTS = ("mlp_only_layers", "full_attn_idxs")


@dataclass(frozen=True)
class Request:
    """One synthetic checkpoint: `like` is the source model folder; None keeps the source's value."""

    like: Path
    dff: int
    layers: int | None = None
    experts: int | None = None
    top_k: int | None = None
    seed: int = 0
    dtype: str = "source"
    allow_declined: bool = False


@dataclass(frozen=True)
class Plan:
    """Everything decided before a byte is written: the config, the tensors and how each is stored."""

    name: str
    family: str
    config: dict
    specs: list[TensorSpec]
    quant: dict[str, tuple[int, int] | None]  # module → (bits, group_size) when quantized
    dtype: str
    disk_bytes: int
    memory_bytes: int
    sidecar: dict


def _fail(request: Request, field: str, problem: str) -> InputError:
    return InputError(str(request.like), field, problem)


def source_model(request: Request) -> tuple[DiscoveredModel, dict]:
    """The source folder's shape (harness.config.discover, the table `init` uses) and its raw config.json."""
    _refuse_link_out(request.like / "config.json", request.like)
    found = read_model(request.like)
    if not isinstance(found, DiscoveredModel):
        raise _fail(request, "--like", found.reason)
    if found.family not in LAYOUTS:
        written = ", ".join(sorted(LAYOUTS))
        raise _fail(request, "model_type", f"no synthetic layout for family {found.family!r} (written: {written})")
    return found, json.loads((request.like / "config.json").read_text(encoding="utf-8"))


def _shrink_layers(config: dict, layers: int, request: Request) -> None:
    source_layers = count(config, "num_hidden_layers")
    if layers > source_layers:
        raise _fail(request, "--layers", f"{layers} exceeds the source's num_hidden_layers ({source_layers})")
    config["num_hidden_layers"] = layers
    for key in PER_LAYER_LISTS:
        if isinstance(config.get(key), list):
            config[key] = config[key][:layers]
    for key in LAYER_INDEX_LISTS:
        if isinstance(config.get(key), list):
            config[key] = [i for i in config[key] if i < layers]


def _storage_dtype(request: Request, config: dict) -> str:
    """The float dtype of non-quantized tensors: the request's, or the source's `torch_dtype` (bf16 if unstated)."""
    dtype = request.dtype
    if dtype == "source":
        dtype = str(config.get("torch_dtype") or config.get("dtype") or "bfloat16")
    if dtype not in DTYPE_BYTES:
        raise _fail(request, "--dtype", f"{dtype!r} is not one of {', '.join(DTYPE_BYTES)} (or source)")
    return dtype


def _quant_plan(specs: list[TensorSpec], spec: object) -> dict[str, tuple[int, int] | None]:
    """Per quantizable module, how the source quantizes a module at that path: its per-module override (mlx-lm's
    `quantization` keys), else the default bits and group size; mlx-lm never quantizes a matrix whose input
    dimension the group size does not divide, and neither does this."""
    if not isinstance(spec, dict):
        return {}
    plan: dict[str, tuple[int, int] | None] = {}
    for tensor in specs:
        if tensor.kind not in ("linear", "embed", "expert") or tensor.leaf != "weight":
            continue
        override = spec.get(tensor.module, True)
        if override is False:
            plan[tensor.module] = None
            continue
        chosen = override if isinstance(override, dict) else spec
        bits, group = int(chosen.get("bits", spec["bits"])), int(chosen.get("group_size", spec["group_size"]))
        plan[tensor.module] = (bits, group) if tensor.shape[-1] % group == 0 else None
    return plan


def _quantization_section(source_spec: dict, plan: dict[str, tuple[int, int] | None]) -> dict:
    """config.json's `quantization` for what was written: the source's settings, with per-module entries only
    where a module differs from the default (so mlx-lm and mlxcel quantize exactly the modules that have scales)."""
    section = {k: v for k, v in source_spec.items() if not isinstance(v, dict | bool)}
    default = (int(source_spec["bits"]), int(source_spec["group_size"]))
    for module, pair in plan.items():
        if pair is not None and pair != default:
            section[module] = {"group_size": pair[1], "bits": pair[0]}
    return section


def _tensor_bytes(tensor: TensorSpec, quant: tuple[int, int] | None, dtype: str) -> int:
    count = math.prod(tensor.shape)
    if tensor.kind == "router_bias":
        return 4 * count
    if quant is None or tensor.leaf != "weight":
        return DTYPE_BYTES[dtype] * count
    bits, group = quant
    return count * bits // 8 + 2 * (count // group) * DTYPE_BYTES[dtype]


def non_weight_files(folder: Path) -> list[Path]:
    """The files copied along (tokenizer, generation config, chat template): everything but weights and config."""
    files = sorted(
        p
        for p in folder.iterdir()
        if p.is_file() and p.name not in ("config.json", SIDECAR) and not p.name.endswith(WEIGHT_SUFFIXES)
    )
    for path in files:
        _refuse_link_out(path, folder)
    return files


def _refuse_link_out(path: Path, folder: Path) -> None:
    """A file read from the source folder must be the folder's own: a symbolic link that leaves it (to
    /etc/shadow, say) would copy a foreign file into the checkpoint. The one exception is a Hugging Face cache
    snapshot (`<repo>/snapshots/<rev>/`), whose files are by design links to the repo's own `<repo>/blobs/`."""
    if not path.is_symlink():
        return
    target = path.resolve()
    home = folder.resolve()
    allowed = [home]
    if home.parent.name == "snapshots":
        allowed.append(home.parent.parent / "blobs")
    if not any(target.is_relative_to(place) for place in allowed):
        raise InputError(
            str(path),
            "--like",
            f"is a symbolic link out of the model folder (to {target}); synth copies only the "
            "folder's own files: copy the file in, or point --like at the folder it belongs to",
        )


def _file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def plan(request: Request, shard_bytes: int = DEFAULT_SHARD_BYTES) -> Plan:
    """Decide the checkpoint for one request, or refuse it (unknown layout, bad override, a declined Dff)."""
    source, config = source_model(request)
    keys = FAMILIES[source.family]
    config = json.loads(json.dumps(config))  # a deep copy the overrides may change
    config[keys.dff] = request.dff
    if request.experts is not None:
        config[keys.n_experts] = request.experts
    if request.top_k is not None:
        config[keys.top_k] = request.top_k
    if int(config[keys.top_k]) > int(config[keys.n_experts]):
        raise _fail(
            request, "--top-k", f"{config[keys.top_k]} exceeds the number of experts ({config[keys.n_experts]})"
        )
    try:
        if request.layers is not None:
            _shrink_layers(config, request.layers, request)
        specs = LAYOUTS[source.family](config)
    except InputError as exc:
        if exc.source != "config.json":
            raise
        raise InputError(str(request.like / exc.source), exc.field, exc.problem) from None  # name the folder
    dtype = _storage_dtype(request, config)
    config["torch_dtype"] = dtype
    shaped = dataclasses.replace(
        source, dff=request.dff, n_experts=int(config[keys.n_experts]), top_k=int(config[keys.top_k])
    )
    declined = predict_null(shaped)
    if declined and not request.allow_declined:
        raise _fail(
            request,
            "--dff",
            f"{request.dff}: mlxcel's fused kernel would decline this checkpoint ({declined}); "
            "--allow-declined writes it anyway",
        )
    if not any(t.kind == "expert" for t in specs):
        raise _fail(request, "--layers", "no MoE layer is left in the first layers: give a larger --layers")
    source_spec = config.get("quantization") or config.get("quantization_config")
    quant = _quant_plan(specs, source_spec) if source.quant.mode == "affine" else {}
    if source.quant.mode not in ("affine", "none"):
        raise _fail(request, "quantization", f"{source.quant.mode} checkpoints are not synthesized (affine or none)")
    if quant:
        section = _quantization_section(source_spec, quant)
        config["quantization"] = section
        if "quantization_config" in config:
            config["quantization_config"] = section
    sizes = [_tensor_bytes(t, quant.get(t.module), dtype) for t in specs]
    disk = sum(sizes) + sum(p.stat().st_size for p in non_weight_files(request.like))
    largest = max(sizes)
    slice_f32 = max(4 * math.prod(t.shape[-2:]) for t in specs)  # one expert (or matrix) generated in float32
    memory = min(shard_bytes, sum(sizes)) + 2 * largest + 3 * slice_f32
    sidecar = {
        "moecal_synthetic": FORMAT,
        "moecal_version": __version__,
        "like": str(request.like.resolve()),
        "like_name": request.like.resolve().name,
        "family": source.family,
        "dff": request.dff,
        "layers": int(config["num_hidden_layers"]),
        "source_layers": source.layers,
        "experts": int(config[keys.n_experts]),
        "top_k": int(config[keys.top_k]),
        "seed": request.seed,
        "dtype": dtype,
        "declined": declined or "",
        "source_config_sha256": _file_sha256(request.like / "config.json"),
        "source_files_sha256": {p.name: _file_sha256(p) for p in non_weight_files(request.like)},
    }
    sidecar["content_hash"] = content_hash(sidecar)
    name = f"{request.like.resolve().name}-dff{request.dff}"
    return Plan(name, source.family, config, specs, quant, dtype, disk, memory, sidecar)


def content_hash(sidecar: dict) -> str:
    """What determines the written bytes (format, source files, every request field): a cache key."""
    fields = {k: v for k, v in sidecar.items() if k not in ("content_hash", "moecal_version", "like")}
    return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()
