"""Tests of harness.runs (run directories and the file formats read and written)."""
