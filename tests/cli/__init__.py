"""Tests of harness.cli (commands end to end)."""
