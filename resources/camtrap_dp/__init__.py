"""Camtrap DP 1.0's profile and table schemas, read by engine/io/camtrap_check.py."""
