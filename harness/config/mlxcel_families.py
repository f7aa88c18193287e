"""Which MoE families reach mlxcel's fused decode-MoE kernel, and how each arm is forced for them — the shipped table.

Read from mlxcel's public source (lablup/mlxcel, up to 2026-10; see docs/mlxcel.md for every fact and its file). A
model family's MoE block either

- calls the shared `switch_layers::SwitchGLU::forward_fused_kernel`, which declines above the cap
  (`fused_moe_max_dff_from(MLXCEL_FUSED_MOE_MAX_DFF, metal_is_available())`): the cap forces each arm (`cap`);
- calls a kernel copy of its own that never reads the cap (qwen3_next and qwen3.5 through it, gemma4's GeGLU copy;
  qwen3_moe and qwen3_vl_moe until PR #1888, 2026-09-14): only `MLXCEL_FUSED_MOE=0` reaches the fallback
  (`switch`), and such a point says nothing about where the cap should sit;
- or never calls the kernel (a local SwitchGLU without the fused path, nemotron_h's relu² path that is opt-in
  behind MLXCEL_FUSED_MOE_RELU2): both arms run the same code, an A/A point (`none`).

A family missing here is "eligibility unknown": included, forced with the switch (works whether or not it reads the
cap), and settled by the dispatch pass. `init --mlxcel-src DIR` derives the same table from a tree instead
(harness.config.mlxcel_tree); this one is the fallback and says where each entry came from.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

Wiring = Literal["cap", "switch", "none"]
SWITCH_ENV = "MLXCEL_FUSED_MOE"  # mlxcel's kill switch: 0/false/off/no force gather_qmm in every family
SWITCH_OFF = "0"
SWITCH_ON = "1"  # any other value keeps the kernel on; set explicitly so a shell's `=0` cannot leak into a fused arm
NEVER_RUNS = "never runs the fused kernel"  # the words of every A/A reason a family gives (an analysis finds them)


@dataclass(frozen=True)
class FamilyWiring:
    """How one family's MoE block reaches the fused kernel, and the file that says so."""

    family: str
    wiring: Wiring
    source: str  # mlxcel file (and what in it) the entry restates
    note: str = ""
    cap_since: str = ""  # ISO date from which the family reads the cap (before it, its own copy ignored it)

    def wiring_on(self, date: str) -> Wiring:
        """The wiring of a binary built on `date` (ISO; "" = today's)."""
        return "switch" if self.cap_since and date and date < self.cap_since else self.wiring


_SHARED = "calls the shared switch_layers::SwitchGLU::forward_fused_kernel (reads the cap)"
_LOCAL = "keeps a local SwitchGLU without the fused path (PR #1888 report, follow-ups)"


def _cap(family: str, file: str) -> FamilyWiring:
    return FamilyWiring(family, "cap", f"src/models/{file}: {_SHARED}")


def _none(family: str, file: str, why: str = _LOCAL) -> FamilyWiring:
    return FamilyWiring(family, "none", f"src/models/{file}: {why}")


TABLE: dict[str, FamilyWiring] = {
    w.family: w
    for w in (
        _cap("mixtral", "mixtral.rs"),
        _cap("qwen2_moe", "qwen2_moe.rs"),
        _cap("phimoe", "phimoe.rs"),
        _cap("olmoe", "olmoe.rs"),
        _cap("lfm2_moe", "lfm2.rs"),
        _cap("dots1", "dots1.rs"),
        _cap("minimax", "minimax.rs"),
        _cap("cohere2_moe", "cohere2_moe.rs"),
        _cap("mellum", "mellum.rs"),
        _cap("laguna", "laguna_layers.rs"),
        FamilyWiring(
            "qwen3_moe",
            "cap",
            f"src/models/qwen3_moe.rs: {_SHARED} since PR #1888 (2026-09-14)",
            "a binary built before 2026-09-14 runs qwen3_moe's own copy, which ignores the cap",
            cap_since="2026-09-14",
        ),
        FamilyWiring(
            "qwen3_vl_moe",
            "cap",
            f"src/models/qwen3_vl_moe.rs: {_SHARED} since PR #1888 (2026-09-14)",
            "before 2026-09-14 it used qwen3_moe's copy, which ignores the cap",
            cap_since="2026-09-14",
        ),
        FamilyWiring(
            "qwen3_next",
            "switch",
            "src/models/qwen3_next.rs: its own forward_fused_kernel copy, no Dff cap",
        ),
        FamilyWiring(
            "qwen3_5_moe",
            "switch",
            "src/models/qwen3_5.rs: reuses qwen3_next's SparseMoeBlock (its own kernel copy, no Dff cap)",
        ),
        FamilyWiring(
            "gemma4",
            "switch",
            "src/models/gemma4.rs: SwitchGeGLU's own forward_fused_kernel (GeGLU kernel), no Dff cap",
        ),
        _none(
            "nemotron_h",
            "nemotron_h.rs",
            "MoE runs the C++ fused_moe_forward with gather_qmm in both arms; the relu² kernel is opt-in "
            "(MLXCEL_FUSED_MOE_RELU2) and not what the cap governs",
        ),
        _none("llama4", "llama4.rs"),
        _none("llama4_text", "llama4.rs"),
        _none("gpt_oss", "gpt_oss.rs"),
        _none("deepseek_v2", "deepseek_v2.rs"),
        _none("deepseek_v3", "deepseek_v3.rs"),
        _none("ernie4_5_moe", "ernie4_5_moe.rs"),
        _none("exaone_moe", "exaone_moe.rs"),
        _none("glm4_moe", "glm4_moe.rs"),
        _none("hunyuan_moe", "hunyuan_moe.rs"),
        _none("granitemoe", "granitemoe.rs", "no fused-kernel call in the model file"),
        _none("granitemoeshared", "granitemoe.rs", "no fused-kernel call in the model file"),
    )
}
# A multimodal export names its decoder in text_config.model_type; these are the same families.
ALIASES = {"qwen3_5_moe_text": "qwen3_5_moe", "gemma4_text": "gemma4", "qwen3_vl_moe_text": "qwen3_vl_moe"}

# Model names of mlxcel's published sweeps (no config.json beside them) → family: the mlx-community checkpoint
# names of the families those sweeps and the design doc name. Only what these patterns say is inferred; a name
# matching none stays a measured point, as before.
NAME_PATTERNS: tuple[tuple[str, str], ...] = (
    ("llama-4-*", "llama4"),
    ("gpt-oss-*", "gpt_oss"),
    ("qwen3.5-*", "qwen3_5_moe"),
    ("qwen3.6-*", "qwen3_5_moe"),
    ("qwen3-next-*", "qwen3_next"),
    ("qwen3-vl-*", "qwen3_vl_moe"),
    ("qwen3-*", "qwen3_moe"),
    ("qwen1.5-moe-*", "qwen2_moe"),
    ("qwen2-moe-*", "qwen2_moe"),
    ("lfm2-*", "lfm2_moe"),
    ("phi-3.5-moe-*", "phimoe"),
    ("mixtral-*", "mixtral"),
    ("olmoe-*", "olmoe"),
    ("gemma-4-*", "gemma4"),
    ("dots.llm1-*", "dots1"),
    ("minimax-*", "minimax"),
    ("nemotron-h-*", "nemotron_h"),
    ("deepseek-v2-*", "deepseek_v2"),
    ("deepseek-v3-*", "deepseek_v3"),
)


def lookup(family: str, table: dict[str, FamilyWiring] | None = None) -> FamilyWiring | None:
    """The entry of a config.json family (aliases resolved); None: not known, eligibility unknown."""
    table = TABLE if table is None else table
    return table.get(ALIASES.get(family, family))


# the patterns as one regular expression, one group per pattern in order (a million names: one match call each)
_NAME_RE = re.compile("|".join(f"({fnmatch.translate(pattern)})" for pattern, _ in NAME_PATTERNS))


def family_from_name(model: str) -> tuple[str, str] | None:
    """(family, pattern) a published sweep's model name matches (case-insensitive), first match wins."""
    found = _NAME_RE.match(model.lower())
    if found is None or found.lastindex is None:
        return None
    pattern, family = NAME_PATTERNS[found.lastindex - 1]
    return family, pattern


def null_reason_by_name(model: str, date: str = "") -> str | None:
    """Why a point of an mlxcel sweep CSV (no model folder beside it) is an A/A point, inferred from its name alone:
    its family never reaches the fused kernel (both arms ran gather_qmm), or it ignored the cap on a binary of
    `date` (ISO, "" = today's), so a sweep forcing the arms with the cap ran the fused kernel in both. None when
    the name matches no pattern or its family is forced by the cap."""
    found = family_from_name(model)
    entry = lookup(found[0]) if found else None
    if found is None or entry is None:
        return None
    family, pattern = found
    wiring = entry.wiring_on(date)
    if wiring == "none":
        ran = f"{NEVER_RUNS}, so both arms ran gather_qmm"
    elif wiring == "switch":
        built = f" on a binary of {date}" if entry.cap_since else ""
        ran = f"ignores the cap{built}, so both cap-forced arms ran the fused kernel"
    else:
        return None
    return f"A/A point: the name matches {pattern} → family {family}, which {ran} ({entry.source})"


_DATE = re.compile(r"(20\d\d-\d\d-\d\d)")


def nulls_by_name(models: Iterable[str], provenance: Mapping[str, object]) -> dict[str, str]:
    """For an mlxcel sweep CSV read without model folders (provenance `source_format`), the points whose name
    alone makes them A/A points (null_reason_by_name), dated by the sweep's date when its provenance or file name
    carries one (else today's binary is assumed). {} for any other input: a moecal run knows its families."""
    if provenance.get("source_format") != "mlxcel sweep CSV":
        return {}
    found = _DATE.search(f"{provenance.get('date') or ''} {provenance.get('source') or ''}")
    date = found.group(1) if found else ""
    reasons = {model: null_reason_by_name(model, date) for model in models}
    return {model: why for model, why in reasons.items() if why}
