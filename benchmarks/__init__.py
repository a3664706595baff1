"""Benchmarks against the peers, in one run: ``python -m benchmarks --help``."""
