"""Benchmarks: scenarios, load generation, reports."""
