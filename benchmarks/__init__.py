"""Benchmarks: every figure a ratio against a baseline measured in the same run."""
