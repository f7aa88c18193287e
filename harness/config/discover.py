"""Model discovery: read MLX / Hugging Face model folders (`config.json`) into the shapes a calibration needs.

A checkout of models is a folder of model folders, each with a `config.json`. The routed-expert intermediate size
(Dff) has a different key per family — `moe_intermediate_size` where the family also has dense MLP layers
(qwen2/3-moe, lfm2-moe, deepseek), `intermediate_size` where every MLP is an expert (mixtral, phimoe, olmoe,
gpt-oss, granitemoe, llama4's text config) — so each family is declared once in FAMILIES with its real key names;
a family not listed is read under the keys most families use (GENERIC_KEYS) and included as "eligibility unknown",
or skipped with the reason when its shape cannot be read — never guessed beyond those names. Multimodal exports
nest the decoder in `text_config` (llama4, qwen3-vl, qwen3.5-moe, gemma4). Quantization is read from
`quantization` (what mlx-lm writes) or `quantization_config` (Hugging Face; mlx-lm writes both), including
mlx-lm's per-module overrides (mixed-precision exports quantize, say, `down_proj` at 6 bits) so eligibility can
check each expert projection.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from harness.errors import InputError
from harness.json_input import load_json_object


@dataclass(frozen=True)
class FamilyKeys:
    """The config.json keys of one MoE family (in its text config when the model nests one)."""

    dff: str
    n_experts: str
    top_k: str = "num_experts_per_tok"
    shared: str | None = None  # key of the shared expert's intermediate size, if the family has one
    shared_count: str | None = None  # deepseek: number of shared experts, each of size `dff`
    dense_variants: bool = False  # the family also has dense members (no expert count): those are not MoE


FAMILIES: dict[str, FamilyKeys] = {
    "qwen2_moe": FamilyKeys("moe_intermediate_size", "num_experts", shared="shared_expert_intermediate_size"),
    "qwen3_moe": FamilyKeys("moe_intermediate_size", "num_experts"),
    "qwen3_vl_moe": FamilyKeys("moe_intermediate_size", "num_experts"),
    "mixtral": FamilyKeys("intermediate_size", "num_local_experts"),
    "phimoe": FamilyKeys("intermediate_size", "num_local_experts"),
    "olmoe": FamilyKeys("intermediate_size", "num_experts"),
    "lfm2_moe": FamilyKeys("moe_intermediate_size", "num_experts"),
    # llama4: `intermediate_size` is the expert (and shared expert) size, `intermediate_size_mlp` the dense MLP's
    "llama4": FamilyKeys("intermediate_size", "num_local_experts", shared="intermediate_size"),
    "llama4_text": FamilyKeys("intermediate_size", "num_local_experts", shared="intermediate_size"),
    "deepseek_v2": FamilyKeys("moe_intermediate_size", "n_routed_experts", shared_count="n_shared_experts"),
    "deepseek_v3": FamilyKeys("moe_intermediate_size", "n_routed_experts", shared_count="n_shared_experts"),
    "gpt_oss": FamilyKeys("intermediate_size", "num_local_experts"),
    "granitemoe": FamilyKeys("intermediate_size", "num_local_experts"),
    "granitemoeshared": FamilyKeys("intermediate_size", "num_local_experts", shared="shared_intermediate_size"),
    # the families mlxcel wired after 0.3.x (keys as mlxcel's config structs read them; docs/mlxcel.md)
    "dots1": FamilyKeys("moe_intermediate_size", "n_routed_experts", shared_count="n_shared_experts"),
    "gemma4": FamilyKeys("moe_intermediate_size", "num_experts", top_k="top_k_experts", dense_variants=True),
    "gemma4_text": FamilyKeys("moe_intermediate_size", "num_experts", top_k="top_k_experts", dense_variants=True),
    "laguna": FamilyKeys("moe_intermediate_size", "num_experts", shared="shared_expert_intermediate_size"),
    "qwen3_next": FamilyKeys("moe_intermediate_size", "num_experts", shared="shared_expert_intermediate_size"),
    "qwen3_5_moe": FamilyKeys("moe_intermediate_size", "num_experts", shared="shared_expert_intermediate_size"),
    "qwen3_5_moe_text": FamilyKeys("moe_intermediate_size", "num_experts", shared="shared_expert_intermediate_size"),
    "minimax": FamilyKeys("intermediate_size", "num_local_experts"),
    # cohere2_moe: `intermediate_size` is the expert's; dense prefix layers use `prefix_dense_intermediate_size`
    "cohere2_moe": FamilyKeys("intermediate_size", "num_experts"),
    "mellum": FamilyKeys("moe_intermediate_size", "num_experts"),
    "nemotron_h": FamilyKeys("moe_intermediate_size", "n_routed_experts", shared="moe_shared_expert_intermediate_size"),
    "ernie4_5_moe": FamilyKeys("moe_intermediate_size", "moe_num_experts", top_k="moe_k"),
    "glm4_moe": FamilyKeys("moe_intermediate_size", "n_routed_experts", shared_count="n_shared_experts"),
}
# A MoE family moecal has no keys for: the expert size, expert count and top-k under the names most families use,
# tried in order; a checkpoint whose three can be read is included ("eligibility unknown"), never skipped silently.
GENERIC_KEYS = {
    "dff": ("moe_intermediate_size", "expert_intermediate_size", "intermediate_size"),
    "n_experts": ("num_experts", "num_local_experts", "n_routed_experts", "moe_num_experts"),
    "top_k": ("num_experts_per_tok", "top_k_experts", "moe_topk", "moe_k", "top_k"),
}
# Keys whose presence marks a model as MoE even when its family is not in FAMILIES (then it is skipped, not guessed).
MOE_MARKERS = ("num_experts", "num_local_experts", "n_routed_experts", "moe_intermediate_size")
# Expert projection leaf names → role (mlx-lm uses gate/up/down_proj; raw Mixtral checkpoints w1/w3/w2).
PROJECTIONS = {"gate_proj": "gate", "up_proj": "up", "down_proj": "down", "w1": "gate", "w3": "up", "w2": "down"}
EXPERT_CONTAINERS = ("switch_mlp", "experts", "block_sparse_moe")
# Formats with a fixed block size and width when the config does not spell them out.
FIXED_FORMATS = {"mxfp4": (4, 32), "nvfp4": (4, 16), "mxfp8": (8, 32)}


@dataclass(frozen=True)
class Quantization:
    """How the expert weights are stored: mode (affine, mxfp4, none, ...) and per projection the set of
    (bits, group_size) pairs that occur across layers (one pair unless a mixed export overrides some layers)."""

    mode: str
    bits: int | None
    group_size: int | None
    projections: dict[str, frozenset[tuple[int | None, int | None]]] = field(default_factory=dict)


@dataclass(frozen=True)
class DiscoveredModel:
    name: str
    path: Path
    family: str
    d_model: int
    dff: int
    n_experts: int
    top_k: int
    layers: int | None
    shared_dff: int
    quant: Quantization
    # a `moecal synth` checkpoint's record (harness.config.synth_checkpoints.SIDECAR); None: a real model
    synthetic: dict | None = None


@dataclass(frozen=True)
class Skipped:
    name: str
    path: Path
    reason: str


def _int(config: dict, key: str, source: Path, prefix: str, required: bool = True) -> int | None:
    """A positive integer field; anything else is an InputError naming the file and the key."""
    value = config.get(key)
    if value is None:
        if required:
            raise InputError(str(source), prefix + key, "required for this model family but missing")
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or value != int(value) or value <= 0:
        raise InputError(str(source), prefix + key, f"expected a positive integer, got {value!r}")
    return int(value)


def _projection_role(module: str) -> str | None:
    parts = module.split(".")
    if len(parts) < 2 or parts[-1] not in PROJECTIONS:
        return None
    return PROJECTIONS[parts[-1]] if any(c in parts for c in EXPERT_CONTAINERS) else None


def read_quantization(config: dict, source: Path) -> Quantization:
    """`quantization` (mlx-lm) or `quantization_config` (Hugging Face) → Quantization; absent → mode `none`."""
    key = "quantization" if "quantization" in config else "quantization_config"
    spec = config.get(key)
    if spec is None:
        return Quantization("none", None, None)
    if not isinstance(spec, dict):
        raise InputError(str(source), key, f"expected an object, got {type(spec).__name__}")
    mode = str(spec.get("mode") or spec.get("quant_method") or "affine").lower()
    fixed_bits, fixed_group = FIXED_FORMATS.get(mode, (None, None))
    bits = _int(spec, "bits", source, f"{key}.", required=False) or fixed_bits
    group = _int(spec, "group_size", source, f"{key}.", required=False) or fixed_group
    if mode == "affine" and (bits is None or group is None):
        raise InputError(str(source), f"{key}.bits", "affine quantization needs `bits` and `group_size`")
    overrides: dict[str, set[tuple[int | None, int | None]]] = {}
    for module, value in spec.items():
        role = _projection_role(module)
        if role is None or not isinstance(value, dict | bool):
            continue
        if value is False:  # mlx-lm: this module is not quantized
            pair: tuple[int | None, int | None] = (16, None)
        elif value is True:
            pair = (bits, group)
        else:
            pair = (
                _int(value, "bits", source, f"{key}.{module}.", required=False) or bits,
                _int(value, "group_size", source, f"{key}.{module}.", required=False) or group,
            )
        overrides.setdefault(role, set()).add(pair)
    projections = {role: frozenset(overrides.get(role, {(bits, group)})) for role in ("gate", "up", "down")}
    return Quantization(mode, bits, group, projections)


def read_model(folder: Path) -> DiscoveredModel | Skipped:
    """One model folder → its shape, or Skipped with the reason (no config.json, no MoE layers, unknown family)."""
    folder = Path(folder)
    source = folder / "config.json"
    if not source.is_file():
        return Skipped(folder.name, folder, "no config.json")
    return model_from_config(folder, load_json_object(source), read_synth_sidecar(folder))


def model_from_config(folder: Path, config: dict, synthetic: dict | None) -> DiscoveredModel | Skipped:
    """The shape read_model finds in `folder` once it holds this config.json and synthetic record: a planned
    synthetic checkpoint is described by what it will be, without writing it (`moecal plan`)."""
    source = folder / "config.json"
    family = str(config.get("model_type") or "")
    text = config.get("text_config")
    config_text, prefix = config, ""
    # multimodal exports (llama4, qwen3-vl) keep the decoder's keys in `text_config`
    if isinstance(text, dict) and (family not in FAMILIES or FAMILIES[family].dff not in config):
        config_text, prefix = text, "text_config."
        family = family if family in FAMILIES else str(text.get("model_type") or family)
    if family not in FAMILIES:
        if not any(config_text.get(k) for k in MOE_MARKERS):
            return Skipped(folder.name, folder, f"no MoE layers (model_type {family or 'missing'})")
        keys = generic_keys(config_text)
        if keys is None:
            wanted = "; ".join(f"{what}: one of {', '.join(names)}" for what, names in GENERIC_KEYS.items())
            return Skipped(
                folder.name, folder, f"MoE family {family!r} unknown to moecal and its shape unreadable ({wanted})"
            )
    else:
        keys = FAMILIES[family]
    if keys.dense_variants and not config_text.get(keys.n_experts):  # a dense gemma4 / nemotron_h
        return Skipped(folder.name, folder, f"no MoE layers ({prefix}{keys.n_experts} absent or 0)")
    dff = _int(config_text, keys.dff, source, prefix)
    shared = 0
    if keys.shared:
        shared = _int(config_text, keys.shared, source, prefix, required=False) or 0
    elif keys.shared_count:
        shared = (_int(config_text, keys.shared_count, source, prefix, required=False) or 0) * dff
    top_k = _int(config_text, keys.top_k, source, prefix)
    n_experts = _int(config_text, keys.n_experts, source, prefix)
    if top_k > n_experts:
        raise InputError(str(source), prefix + keys.top_k, f"{top_k} exceeds {keys.n_experts}={n_experts}")
    return DiscoveredModel(
        name=folder.name,
        path=folder,
        family=family,
        d_model=_int(config_text, "hidden_size", source, prefix),
        dff=dff,
        n_experts=n_experts,
        top_k=top_k,
        layers=_int(config_text, "num_hidden_layers", source, prefix, required=False),
        shared_dff=shared,
        quant=read_quantization(config, source),
        synthetic=synthetic,
    )


def generic_keys(config: dict) -> FamilyKeys | None:
    """The keys an unknown MoE family's shape can be read under (GENERIC_KEYS), None when one of the three is
    missing. `intermediate_size` counts as the expert size only when no `moe_intermediate_size` exists (the
    families that have both use the latter for experts)."""
    found = {what: next((k for k in names if config.get(k)), None) for what, names in GENERIC_KEYS.items()}
    if None in found.values():
        return None
    return FamilyKeys(found["dff"], found["n_experts"], top_k=found["top_k"])


# written by `moecal synth` (harness.config.synth_checkpoints) beside a synthetic checkpoint
SYNTH_SIDECAR = "moecal-synth.json"


def read_synth_sidecar(folder: Path) -> dict | None:
    """A synthetic checkpoint's record (None for a real model folder, or an unreadable record). It lives here, with
    the rest of reading a model folder, so harness.config.synth_checkpoints builds on this module and not the other way
    round."""
    try:
        data = load_json_object(Path(folder) / SYNTH_SIDECAR)
    except InputError:
        return None
    return data if isinstance(data, dict) and data.get("moecal_synthetic") else None


def scan(models_dir: Path) -> tuple[list[DiscoveredModel], list[Skipped]]:
    """Every immediate sub-folder of `models_dir` (or the folder itself, if it is one model), sorted by name."""
    models_dir = Path(models_dir)
    if not models_dir.is_dir():
        raise InputError(str(models_dir), "--models", "not a directory")
    folders = [models_dir] if (models_dir / "config.json").is_file() else sorted(p for p in models_dir.iterdir())
    found: list[DiscoveredModel] = []
    skipped: list[Skipped] = []
    for folder in folders:
        if not folder.is_dir() or folder.name.startswith("."):
            continue
        result = read_model(folder)
        (found if isinstance(result, DiscoveredModel) else skipped).append(result)
    return found, skipped
