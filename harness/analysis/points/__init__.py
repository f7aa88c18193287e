"""From measured samples to one row per point: reading the inputs, the ratio's interval, the A/A floor, drift."""
