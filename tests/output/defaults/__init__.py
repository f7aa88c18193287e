"""Tests of harness.output.defaults."""
