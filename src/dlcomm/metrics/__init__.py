"""Metric names (one module, read by the tracker and the report)."""
