"""Exports: the files Quadrat writes for others to read."""
