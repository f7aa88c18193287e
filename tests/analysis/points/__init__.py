"""Tests of harness.analysis.points."""
