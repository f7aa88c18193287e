"""Pure statistics on stored runs: per-point intervals, the crossover curve, the decision policy, regression checks."""
