"""Benchmarks and studies; run each as `python -m bench.NAME` from the repository root."""
