import sys
from tests.calibration import *
for name in sys.argv[2:]:
    sc = score(REGIMES[name], int(sys.argv[1]), 200, seed=5)
    print(f"{name:30} {sc.point_coverage:.3f} {sc.crossover_coverage:.3f} {sc.action_rate:.3f} {sc.raise_rate:.3f} {sc.false_action:.3f}")
