"""Tests of harness.output.plots."""
