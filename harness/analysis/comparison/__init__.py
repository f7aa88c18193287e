"""Several runs side by side: regression checks, two runs of one sweep, per-backend defaults, knob settings."""
