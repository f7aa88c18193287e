"""What a sweep is asked to do: configs, presets, the model catalog, discovery, eligibility, synthetic checkpoints."""
