"""Will mlxcel's fused decode-MoE kernel run for this checkpoint, and how is each arm forced? A prediction from
config.json and what moecal knows of mlxcel (`Knowledge`: the shipped table, or one derived from a tree).

The rules restate `SwitchGLU::forward_fused_kernel` (src/models/switch_layers.rs), which returns None — and the
caller takes the gather_qmm fallback — for: a non-affine mode; gate/up not 4 or 8 bits; down not 4, 6 or 8 bits;
gate and up bits that differ; group sizes that differ across gate/up/down; a 6-bit down with Dff not a multiple of
16. The kernel runs only for families whose MoE block calls it (harness.config.mlxcel_families); a family that calls
a copy of its own ignores the cap, so its arms are forced with MLXCEL_FUSED_MOE instead (`forced_by: switch`) and
its point stays out of the cap's crossover. When either arm cannot take the fused path, both arms run the same code
and the point can only ever be a null point; measuring it costs a model load per run for nothing.

A prediction is only a prediction: the dispatch pass of a sweep is the ground truth in both directions
(harness.measure.dispatch), and harness.analysis.comparison.backend_defaults.mispredictions reports where the two
disagree.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NotRequired, TypedDict

from harness.config.discover import DiscoveredModel
from harness.config.mlxcel_families import NEVER_RUNS, SWITCH_ENV, TABLE, FamilyWiring, lookup

SWITCH_LAYERS = "src/models/switch_layers.rs"


@dataclass(frozen=True)
class KernelRules:
    """forward_fused_kernel's declines that config.json can predict, and where they were read."""

    gate_up_bits: tuple[int, ...] = (4, 8)
    down_bits: tuple[int, ...] = (4, 6, 8)
    six_bit_dff_multiple: int = 16  # a 6-bit down_proj needs whole uint32 columns
    affine_only: bool = True
    source: str = f"{SWITCH_LAYERS} SwitchGLU::forward_fused_kernel (shipped reading of lablup/mlxcel, 2026-10)"


@dataclass(frozen=True)
class Knowledge:
    """What moecal knows of the mlxcel it calibrates: the family table, the decline rules, and their origin."""

    families: dict[str, FamilyWiring] = field(default_factory=lambda: dict(TABLE))
    rules: KernelRules = KernelRules()
    origin: str = "moecal's shipped table (lablup/mlxcel source to 2026-10; docs/mlxcel.md)"


SHIPPED = Knowledge()


def predict_null(model: DiscoveredModel, knowledge: Knowledge = SHIPPED) -> str | None:
    """Why the fused kernel would decline this model (so the point will be null), or None if it should run (or
    nothing is known of its family: the dispatch pass settles it)."""
    quant, rules = model.quant, knowledge.rules
    if quant.mode == "none":
        return "not quantized: the fused kernel needs affine-quantized experts"
    if rules.affine_only and quant.mode != "affine":
        return f"{quant.mode} quantization: the fused kernel runs only affine"
    wiring = lookup(model.family, knowledge.families)
    if wiring is not None and wiring.wiring == "none":
        return f"family {model.family} {NEVER_RUNS} ({wiring.source})"
    gate, up, down = (quant.projections[role] for role in ("gate", "up", "down"))
    allowed_bits = (("gate", gate, rules.gate_up_bits), ("up", up, rules.gate_up_bits), ("down", down, rules.down_bits))
    for role, pairs, allowed in allowed_bits:
        bad = sorted({bits for bits, _ in pairs if bits not in allowed}, key=str)
        if bad:
            return f"{role}_proj at {bad[0]} bits: the fused kernel takes {'/'.join(map(str, allowed))}-bit {role}"
    if {b for b, _ in gate} != {b for b, _ in up}:
        return "gate and up projections have different bits"
    groups = {g for _, g in gate | up | down}
    if len(groups) > 1:
        return f"group sizes differ across gate/up/down ({', '.join(map(str, sorted(groups, key=str)))})"
    if any(bits == 6 for bits, _ in down) and model.dff % rules.six_bit_dff_multiple:
        return f"6-bit down_proj needs Dff divisible by {rules.six_bit_dff_multiple} (Dff {model.dff})"
    return None


def cap_not_read(model: DiscoveredModel, knowledge: Knowledge = SHIPPED) -> str | None:
    """Why the model's point says nothing about the cap — its family ignores it, or nothing is known of the
    family — or None where the family reads MLXCEL_FUSED_MOE_MAX_DFF. What an import states of such a point (it
    cannot know how the arms were forced); arm_forcing adds how a sweep forces them."""
    wiring = lookup(model.family, knowledge.families)
    if wiring is None:
        return f"eligibility unknown: family {model.family} is not in {knowledge.origin}"
    return f"ignores the cap ({wiring.source})" if wiring.wiring == "switch" else None


def arm_forcing(model: DiscoveredModel, knowledge: Knowledge = SHIPPED) -> tuple[str, str | None]:
    """(forced_by, eligibility note): `cap` where the family reads MLXCEL_FUSED_MOE_MAX_DFF; `switch`
    (MLXCEL_FUSED_MOE=0 for the fallback) where it runs its own kernel copy or is unknown. The note says why a
    point stays out of the cap's crossover, or that nothing is known of the family."""
    why = cap_not_read(model, knowledge)
    if why is None:
        return "cap", None
    if lookup(model.family, knowledge.families) is None:
        return (
            "switch",
            f"{why}; settled by the dispatch pass, arms forced with {SWITCH_ENV}, kept out of the cap's crossover",
        )
    return "switch", f"{why}; arms forced with {SWITCH_ENV}"


class ModelEntryYAML(TypedDict):
    """A config's `models:` entry as model_entry writes it (harness.config.schema.ModelEntry validates it): the
    optional keys only where the model has them."""

    name: str
    model_path: str
    family: str
    dff: int
    d_model: int
    n_experts: int
    top_k: int
    quant_mode: str
    bits: NotRequired[int]
    group_size: NotRequired[int]
    layers: NotRequired[int]
    shared_dff: NotRequired[int]
    synthetic: NotRequired[str]
    expect_null: NotRequired[str]
    forced_by: NotRequired[str]
    eligibility: NotRequired[str]


def model_entry(model: DiscoveredModel, knowledge: Knowledge = SHIPPED) -> ModelEntryYAML:
    """The config entry `moecal init` writes for a discovered model (shape, quantization, synthetic note), with
    `expect_null` when the kernel is predicted to decline it. Here rather than in the init command so a sweep that
    synthesizes checkpoints builds the same entries without importing a CLI module."""
    entry: ModelEntryYAML = {
        "name": model.name,
        "model_path": str(model.path.resolve()),
        "family": f"{model.family} (synthetic)" if model.synthetic else model.family,
        "dff": model.dff,
        "d_model": model.d_model,
        "n_experts": model.n_experts,
        "top_k": model.top_k,
        "quant_mode": model.quant.mode,
    }
    if model.quant.bits:
        entry["bits"] = model.quant.bits
    if model.quant.group_size:
        entry["group_size"] = model.quant.group_size
    if model.layers:
        entry["layers"] = model.layers
    if model.shared_dff:
        entry["shared_dff"] = model.shared_dff
    if model.synthetic:
        entry["synthetic"] = synthetic_note(model.synthetic)
    reason = predict_null(model, knowledge)
    if reason:
        entry["expect_null"] = reason
    forced_by, note = arm_forcing(model, knowledge)
    if forced_by != "cap":
        entry["forced_by"] = forced_by
    if note:
        entry["eligibility"] = note
    return entry


def synthetic_note(record: dict) -> str:
    """How a synthetic checkpoint differs from a real one, for the config and the addendum."""
    return (
        f"random weights shaped like {record.get('like_name')}, {record.get('layers')} of "
        f"{record.get('source_layers')} layers, seed {record.get('seed')}"
    )
