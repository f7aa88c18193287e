"""Tests of harness.devices (the kernels against the float64 reference, on real or emulated devices)."""
