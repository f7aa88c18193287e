"""Tests of harness.analysis.evidence."""
