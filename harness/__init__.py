"""moecal: measure where a fused decode-MoE kernel stops beating the unfused fallback, per backend."""

__version__ = "0.1.0"
