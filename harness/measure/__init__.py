"""Taking measurements: backends, workloads, the timing protocol, the sweep loop and its scale-out."""
