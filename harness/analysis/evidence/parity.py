"""Greedy parity of command workloads: does the fused arm generate what the fallback arm generates?

Each run's generated output is captured (config `parity:`), split into pieces — token ids when the output is a list
of integers, else whitespace-separated words — and compared with the latest run of the other path. Within a round
the second arm's run is therefore compared with the first's (the same round), and the first with the previous
round's (the first run of each visit of a point, one per pass over the grid, with none). Both arms decode greedily,
so every comparison should be identical; the row records `tokens_agree` (the leading pieces that agree) and `tokens`
(the pieces compared: the longer of the two outputs), so a run is identical exactly when tokens_agree == tokens.

Per point the report shows one class: `identical`, `diverges at token k` (k = the fewest leading pieces that
agreed in any comparison, counted from 0) or `no parity data`. A divergence before EARLY_DIVERGENCE tokens is
flagged: low-precision kernels may legitimately flip a near-tie token late in a long greedy run, but a fused kernel
that disagrees within the first few tokens more likely computes something else.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from harness.config.schema import kind_meaning

EARLY_DIVERGENCE = 16
_INTEGER = re.compile(r"-?\d+")


def pieces(text: str) -> list[str]:
    """Token ids if `text` is a list of integers (`[1, 2, 3]`, `1 2 3`), else its whitespace-separated words."""
    ids = re.findall(r"[^\s,\[\]]+", text)
    if ids and all(_INTEGER.fullmatch(t) for t in ids):
        return ids
    return text.split()


def capture_regex(pattern: re.Pattern[str], output: str) -> list[str] | None:
    """Group 1 of every match in the run's output, joined; None when nothing matched (no parity data)."""
    found = [m.group(1) for m in pattern.finditer(output)]
    return pieces(" ".join(found)) if found else None


def capture_file(path: Path) -> list[str] | None:
    try:
        return pieces(Path(path).read_text(encoding="utf-8", errors="replace"))
    except OSError:
        return None


def agreement(ours: list[str], theirs: list[str]) -> tuple[int, int]:
    """(leading pieces that agree, pieces compared = the longer length)."""
    agree = 0
    for a, b in zip(ours, theirs, strict=False):
        if a != b:
            break
        agree += 1
    return agree, max(len(ours), len(theirs))


@dataclass(frozen=True, kw_only=True)
class PointParity:
    comparisons: int
    compared_tokens: int
    diverges_at: int | None  # None: every comparison identical

    @property
    def label(self) -> str:
        if self.comparisons == 0:
            return "no parity data"
        if self.diverges_at is None:
            return f"identical ({self.compared_tokens} tokens, {self.comparisons} comparisons)"
        early = " — EARLY divergence" if self.diverges_at < EARLY_DIVERGENCE else ""
        return f"diverges at token {self.diverges_at} of {self.compared_tokens}{early}"


def point_parity(rows: pd.DataFrame) -> PointParity:
    """The parity class of one point from its sample rows (ok rows with `tokens_agree` set)."""
    ok = rows[(rows["status"] == "ok")]
    agree = pd.to_numeric(ok["tokens_agree"], errors="coerce")
    compared = pd.to_numeric(ok["tokens"], errors="coerce")
    mask = agree.notna() & compared.notna()
    if not mask.any():
        return PointParity(comparisons=0, compared_tokens=0, diverges_at=None)
    agree, compared = agree[mask].astype(int), compared[mask].astype(int)
    diverged = agree < compared
    return PointParity(
        comparisons=int(mask.sum()),
        compared_tokens=int(compared.max()),
        diverges_at=int(agree[diverged].min()) if diverged.any() else None,
    )


def parity_by_model(samples: pd.DataFrame) -> dict[str, PointParity]:
    """Model name → its parity, from the whole-model points of one run (command or decode: one point per model).
    `layer` points compare one MoE layer's output (rel_rms), not generated tokens, so they have no parity class."""
    models = samples[samples["workload"].map(lambda w: kind_meaning(w).whole_model).astype(bool)]
    return {str(model): point_parity(rows) for model, rows in models.groupby("model", sort=False)}
