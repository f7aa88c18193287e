"""What a run shows besides timings: which MoE path ran, greedy parity, the bytes-per-token bound."""
