"""Tests of harness.output (what people read)."""
