"""Tests of harness.analysis.decision.decide."""
