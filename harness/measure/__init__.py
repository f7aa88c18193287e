"""Taking measurements: workloads, the timing protocol, the sweep loop and its scale-out; the kernels are devices."""
