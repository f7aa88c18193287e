"""Tests of harness.analysis.comparison."""
