"""The decision engine's calibration table for issue 29 on SYNTHETIC sweeps (tests/support/simulation.py): per regime
and protocol, the runs per arm a decision costs, its wrong-action rate (a raise or lower the truth does not support, or
a lower past a clear fused win), power (the right raise or lower, among truths that call for one) and crossover
coverage. Nothing is measured and nothing is written; the full table takes minutes (the dense grid dominates).

    .venv/bin/python scripts/decision_calibration.py                      # fixed 3, 4, 5, 10, 20, 40 rounds, 400 sweeps
    .venv/bin/python scripts/decision_calibration.py --rounds 3 10 --sweeps 200 --regime "sparse curved"
    .venv/bin/python scripts/decision_calibration.py --rounds 3 4 5 10 20   # issue 29's one pass vs two passes table
    .venv/bin/python scripts/decision_calibration.py --rounds 3 4 5 10 20 --replication 0 0.5 2   # the rule tried
    .venv/bin/python scripts/decision_calibration.py --rounds 3 5 10 --sweeps 200 --check-pairs   # `check`'s gate
    .venv/bin/python scripts/decision_calibration.py --rounds 3 5 10 20 --one-visit-rule-off \
        --regime "sparse flat slow drift, sweep CSV"   # issue 36's imported formats, with and without the rule
    .venv/bin/python scripts/decision_calibration.py --rounds 5 10 --hint --regime "sparse curved, two passes"
    .venv/bin/python scripts/decision_calibration.py --rounds 5 10 --screen-split --regime "sparse step 3%"
    .venv/bin/python scripts/decision_calibration.py --rounds 3 5 10 20 --sweeps 200 --table \
        --regime "sparse curved, two passes"   # issue 36's regime × n table (docs/design.md §7), markdown rows

A regime named `…, two passes` measures each point's rounds in two passes over the grid
(harness.analysis.points.sweep_drift) and is scored on its one-pass twin's truths, noise and drift.

A new protocol (say, stopping when the decision is settled) is a tests.support.calibration.Protocol: its name, the most
rounds per point it may use, and a function from simulated sweeps to an Outcome (decisions and runs spent); add it to
`protocols` below and it gets a row per regime, scored against the same truths as the fixed protocol.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root: tests.support.calibration

from tests.support.calibration import (  # noqa: E402
    CHECK_REGIMES,
    PROTOCOL_REGIMES,
    check_pairs,
    fixed,
    hint_calibration,
    markdown_table,
    protocol_table,
)
from tests.support.screen_split import screen_split  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, nargs="+", default=[3, 4, 5, 10, 20, 40])
    parser.add_argument("--sweeps", type=int, default=400)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--regime", action="append", choices=sorted(PROTOCOL_REGIMES), help="default: all")
    parser.add_argument(
        "--replication",
        type=float,
        nargs="+",
        default=[],
        metavar="SHARE",
        help="also score the replication rule (each pass beyond 1 ± SHARE·δ; docs/design.md §7, not in the decision)",
    )
    parser.add_argument(
        "--one-visit-rule-off",
        action="store_true",
        help="also score each protocol without the one-visit rule (a move from points measured in one visit, not "
        "interleaved, not withheld: the engine before issue 36)",
    )
    parser.add_argument(
        "--one-round-rule-off",
        action="store_true",
        help="also score each protocol without the one-round rule (a move from two-pass points whose earlier half "
        "holds one round not withheld: the engine before issue 36)",
    )
    parser.add_argument(
        "--hint",
        action="store_true",
        help="instead: the rounds hint of keeps at each --rounds, followed (the same truth measured at the N it names)",
    )
    parser.add_argument(
        "--check-pairs",
        action="store_true",
        help="instead: how often `check` fails sweep pairs of one truth (false fails) and of a moved crossover (power)",
    )
    parser.add_argument(
        "--screen-split",
        action="store_true",
        help="instead: where power goes with slowed runs present, at the lowering trigger (tests/support/"
        "screen_split.py: slowed rounds dropped and kept, the trigger's df, its test with the screen, pooling and "
        "drift inflation switched)",
    )
    parser.add_argument(
        "--table",
        action="store_true",
        help="instead: the fixed protocol at each --rounds as one markdown row per regime (false actions, power, "
        "crossover coverage, closed width, unusable, runs per arm; the same seeds and figures as the plain table)",
    )
    args = parser.parse_args()
    if args.check_pairs:
        for name, (regime, moved, default) in CHECK_REGIMES.items():
            for n in args.rounds:
                pairs = check_pairs(regime, n, args.sweeps, seed=31 + args.seed, moved=moved, default=default)
                print(f"check, {name}, {n} rounds, {args.sweeps} pairs: {pairs.words()}", flush=True)
        return
    regimes = [PROTOCOL_REGIMES[name] for name in args.regime or PROTOCOL_REGIMES]
    if args.screen_split:
        for regime in regimes:
            for n in args.rounds:
                for line in screen_split(regime, n, args.sweeps, args.seed).lines():
                    print(f"{regime.name}, n={n}: {line}", flush=True)
        return
    if args.hint:
        for regime in regimes:
            for n in args.rounds:
                sc = hint_calibration(regime, n, args.sweeps, 53 + args.seed + n)
                print(
                    f"{regime.name:44} n={n:2d} keeps with a hint {sc.keeps:4d}, named {sc.named:4d}, followed "
                    f"{sc.followed:4d}, of which decided {sc.share():.3f} ± {sc.mc_error():.3f}; withheld, decided "
                    f"at 20 rounds {sc.withheld_decided:.3f} (the chance they quoted {sc.withheld_chance:.3f})",
                    flush=True,
                )
        return
    if args.table:
        for line in markdown_table(regimes, args.rounds, args.sweeps, args.seed):
            print(line, flush=True)
        return
    protocols = [fixed(n, share) for n in args.rounds for share in [None, *args.replication]]
    if args.one_visit_rule_off:
        protocols += [fixed(n, one_visit_rule=False) for n in args.rounds]
    if args.one_round_rule_off:
        protocols += [fixed(n, one_round_rule=False) for n in args.rounds]
    for line in protocol_table(regimes, protocols, args.sweeps, args.seed):
        print(line, flush=True)


if __name__ == "__main__":
    main()
