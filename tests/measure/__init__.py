"""Tests of harness.measure (taking measurements: the protocol, workloads, fleets, guards)."""
