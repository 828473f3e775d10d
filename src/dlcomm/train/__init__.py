"""Per-rank training: optimizer and schedule, the loop, evaluation."""
