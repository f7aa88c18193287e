"""How often resampling a published mlxcel sweep's runs changes the decision, with its A/A points counted as measured
(the name inference of harness.config.mlxcel_families turned off) and as the A/A points they are.

Each resample draws, per point and arm, as many runs as the sweep has, with replacement, and decides at the
current default. Usage: python scripts/resample_aa_point.py SWEEP.csv [RESAMPLES] [CURRENT_DEFAULT]
(tests/fixtures/gb10-design-example.csv is the published 2026-07-10 GB10 sweep).
"""

from __future__ import annotations

import collections
import sys

import numpy as np

from harness.analysis.decision.pipeline import Options, analyse
from harness.analysis.points.inputs import LoadedInput, load_input


def main(path: str, resamples: int = 200, current: int = 8192) -> None:
    base = load_input(path)
    rng = np.random.default_rng(20261202)
    provenances = {"A/A points measured": {**base.provenance, "source_format": "resampled"}, "A/A": base.provenance}
    counts: dict[str, collections.Counter] = {label: collections.Counter() for label in provenances}
    for _ in range(resamples):
        samples = base.samples.copy()
        for _, rows in samples.groupby(["model", "arm"]).groups.items():
            samples.loc[rows, "tok_s"] = rng.choice(samples.loc[rows, "tok_s"].to_numpy(), size=len(rows))
        for label, provenance in provenances.items():
            decision = analyse(LoadedInput(samples, None, provenance), Options(current_default=current)).result.decision
            counts[label][f"{decision.action} {decision.recommended_cap}"] += 1
    for label, counter in counts.items():
        print(f"{label}: " + ", ".join(f"{k} in {v}/{resamples}" for k, v in counter.most_common()))


if __name__ == "__main__":
    main(sys.argv[1], *(int(a) for a in sys.argv[2:4]))
