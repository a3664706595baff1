"""Benchmarks against the peers: ``python -m benchmarks list | run SUITE | compare A B``."""
