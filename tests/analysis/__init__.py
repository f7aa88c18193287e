"""Tests of harness.analysis (pure statistics on stored runs)."""
