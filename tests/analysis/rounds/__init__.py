"""Tests of harness.analysis.rounds."""
