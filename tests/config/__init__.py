"""Tests of harness.config (what is asked: configs, registries, discovery)."""
