"""Observe: run the locked runtime over the benchmark harness, judge answers, and diagnose each failure."""
