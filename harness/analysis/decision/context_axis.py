"""Whether one cap fits every depth of a context axis.

Attention's share of a decode step grows with the KV cache (mlxcel #2061 measured sdpa at 2.1–4.6% of a step at
pp512 on gfx1151), so the fused path's share of the step, and with it the fused/fallback ratio, moves with context
depth. A command sweep with `workload.prompt_tokens: [512, 8192]` measures every depth as its own shape family
(harness.analysis.points.stats.family_labels); the decision over several families already takes the most conservative
cap (harness.analysis.decision.decide). This says in words whether the depths agree on one cap, or which depth binds.
"""

from __future__ import annotations

from collections.abc import Sequence

from harness.analysis.decision.decision_json import FamilyJSON
from harness.analysis.points.stats import is_context


def depth_statement(families: Sequence[FamilyJSON], overall_cap: int | None) -> str | None:
    """One sentence over the context families' decisions; None for a run without a context axis."""
    depths = []
    for family in families:
        _, _, cell = str(family["family"]).partition(" ")
        if is_context(cell):
            depths.append((int(cell[3:]), family["action"], family["recommended_cap"]))
    if len(depths) < 2:
        return None
    depths.sort()
    each = "; ".join(f"{d} tokens: {action} {cap if cap is not None else '-'}" for d, action, cap in depths)
    caps = {cap for _, _, cap in depths}
    if len(caps) == 1:
        return f"One cap fits every depth ({each})."
    binding = [d for d, _, cap in depths if cap == overall_cap]
    where = f", bound by the {', '.join(map(str, binding))}-token context" if binding else ""
    return (
        f"The depths disagree ({each}): no one cap is best at every depth; the cap that holds at every depth is "
        f"{overall_cap if overall_cap is not None else 'none'}{where}."
    )
