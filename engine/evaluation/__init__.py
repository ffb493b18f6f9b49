"""Evaluation: pure retrieval metrics, significance tests, scoring run files."""
