"""Tests of harness.output.addendum."""
