"""INQUIRE-format benchmarks: the INQUIRE-Rerank dataset and the benchmark runner."""
