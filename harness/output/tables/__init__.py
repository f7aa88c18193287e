"""The console and fleet tables: the per-point summary table and the fleet report."""
