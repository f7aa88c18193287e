"""Shared test helpers: the CLI runner, synthetic sweeps and models, simulations, emulated devices."""
